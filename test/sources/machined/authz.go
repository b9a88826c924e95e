package machined

import (
	"context"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// rules mirror machined's authorization table (Talos v1.13.0,
// internal/app/machined/pkg/system/services/machined.go) for the methods the
// shim serves: the roles, carried as the client certificate's
// organizations, allowed to call each.
var rules = map[string][]string{
	"/machine.MachineService/ServiceList":    {"os:admin", "os:operator", "os:reader"},
	"/machine.MachineService/Version":        {"os:admin", "os:operator", "os:reader"},
	"/machine.MachineService/EtcdMemberList": {"os:admin", "os:operator", "os:reader", "os:etcd:backup"},
	"/machine.MachineService/EtcdStatus":     {"os:admin", "os:operator", "os:reader", "os:etcd:backup"},
	"/machine.MachineService/EtcdAlarmList":  {"os:admin", "os:operator", "os:reader", "os:etcd:backup"},
}

// authorize rejects a call whose client certificate carries no allowed role
// (unlisted methods need os:admin, as in machined).
func authorize(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	allowed, ok := rules[info.FullMethod]
	if !ok {
		allowed = []string{"os:admin"}
	}
	p, _ := peer.FromContext(ctx)
	if p != nil {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			for _, role := range ti.State.PeerCertificates[0].Subject.Organization {
				if slices.Contains(allowed, role) {
					return handler(ctx, req)
				}
			}
		}
	}
	return nil, status.Errorf(codes.PermissionDenied, "not authorized: %s needs one of %v", info.FullMethod, allowed)
}
