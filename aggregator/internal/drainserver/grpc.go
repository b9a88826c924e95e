package drainserver

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/cozystack/cozy-health/aggregator/internal/delegated"
	pb "github.com/cozystack/cozy-health/proto/cozyhealth/v1"
)

// GRPCServer is the gRPC front end of a Service (DrainService.DrainCheck).
type GRPCServer struct {
	pb.UnimplementedDrainServiceServer
	svc  *Service
	auth *Authorizer
}

var _ pb.DrainServiceServer = (*GRPCServer)(nil)

// NewGRPCServer returns the gRPC front end of svc. The caller sends
// "authorization: Bearer <token>" metadata, which auth checks: the gRPC
// port is the ingest port, reachable from the node network, and no
// apiserver proxy stands in front of it, so it never answers anonymously.
// With a nil auth every call is refused (Unauthenticated).
func NewGRPCServer(svc *Service, auth *Authorizer) *GRPCServer {
	return &GRPCServer{svc: svc, auth: auth}
}

// DrainCheck implements pb.DrainServiceServer.
func (g *GRPCServer) DrainCheck(ctx context.Context, req *pb.DrainCheckRequest) (*pb.DrainCheckResponse, error) {
	if g.auth == nil {
		g.svc.reject("grpc", "unauthenticated", req.GetNode())
		return nil, status.Error(codes.Unauthenticated, "the gRPC drain check needs delegated authentication, which this server lacks")
	}
	var token string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("authorization"); len(v) > 0 {
			token = delegated.BearerToken(v[0])
		}
	}
	var from string
	if p, ok := peer.FromContext(ctx); ok {
		from = p.Addr.String()
	}
	_, err := g.auth.Authorize(ctx, token, from)
	switch {
	case errors.Is(err, delegated.ErrUnauthenticated):
		g.svc.reject("grpc", "unauthenticated", req.GetNode())
		return nil, status.Error(codes.Unauthenticated, err.Error())
	case errors.Is(err, delegated.ErrForbidden):
		g.svc.reject("grpc", "forbidden", req.GetNode())
		return nil, status.Error(codes.PermissionDenied, err.Error())
	case errors.Is(err, delegated.ErrThrottled):
		g.svc.reject("grpc", "throttled", req.GetNode())
		return nil, status.Error(codes.ResourceExhausted, err.Error())
	case err != nil:
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	intent, err := intentFromProto(req.GetIntent())
	if err != nil {
		g.svc.reject("grpc", "invalid_intent", req.GetNode())
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	res, err := g.svc.CheckIntent(req.GetNode(), "grpc", intent)
	switch {
	case errors.Is(err, errInvalidNode):
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, errNodeNotFound):
		return nil, status.Error(codes.NotFound, err.Error())
	case err != nil:
		return nil, status.Error(codes.Internal, err.Error())
	}
	return resultToProto(res), nil
}
