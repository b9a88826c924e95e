package drain

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// GRPCServer is the gRPC front end of a Service (DrainService.DrainCheck).
type GRPCServer struct {
	pb.UnimplementedDrainServiceServer
	svc  *Service
	auth *Authorizer
}

var _ pb.DrainServiceServer = (*GRPCServer)(nil)

// NewGRPCServer returns the gRPC front end of svc; auth may be nil. With
// auth, the caller sends "authorization: Bearer <token>" metadata.
func NewGRPCServer(svc *Service, auth *Authorizer) *GRPCServer {
	return &GRPCServer{svc: svc, auth: auth}
}

// DrainCheck implements pb.DrainServiceServer.
func (g *GRPCServer) DrainCheck(ctx context.Context, req *pb.DrainCheckRequest) (*pb.DrainCheckResponse, error) {
	if g.auth != nil {
		var token string
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			if v := md.Get("authorization"); len(v) > 0 {
				token = BearerToken(v[0])
			}
		}
		_, err := g.auth.Authorize(ctx, token)
		switch {
		case errors.Is(err, ErrUnauthenticated):
			g.svc.reject("grpc", "unauthenticated", req.GetNode())
			return nil, status.Error(codes.Unauthenticated, err.Error())
		case errors.Is(err, ErrForbidden):
			g.svc.reject("grpc", "forbidden", req.GetNode())
			return nil, status.Error(codes.PermissionDenied, err.Error())
		case err != nil:
			return nil, status.Error(codes.Unavailable, err.Error())
		}
	}
	res, err := g.svc.Check(req.GetNode(), "grpc")
	switch {
	case errors.Is(err, ErrInvalidNode):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrNodeNotFound):
		return nil, status.Error(codes.NotFound, err.Error())
	case err != nil:
		return nil, status.Error(codes.Internal, err.Error())
	}
	return ResultToProto(res), nil
}
