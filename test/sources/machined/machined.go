// Package machined is a stand-in for Talos' machined, the Talos machine API
// server, for tests and the local lab (the agent's client of that API is
// agent/internal/sources/machineapi): it implements the real generated
// machine.MachineService over mutual TLS and answers the health RPCs the
// agent uses (ServiceList, EtcdMemberList, EtcdStatus, EtcdAlarmList,
// Version) from a REAL etcd member, the way Talos' machined does (it asks
// the local member with clientv3). It can be told to hang (a "talos-hang"
// fault) and to report kubelet/cri states.
package machined

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Config configures a Server.
type Config struct {
	// Hostname is reported in every response's metadata.
	Hostname string
	// EtcdEndpoint is the local etcd member's client URL; empty makes the
	// node a worker (no etcd service, etcd RPCs fail like on a worker).
	EtcdEndpoint string
	// TLS is the server's TLS config (see PKI.ServerTLS).
	TLS *tls.Config
	// HealthTimeout bounds the etcd health probe behind ServiceList (default 500ms).
	HealthTimeout time.Duration
}

// ServiceState is a settable Talos service state.
type ServiceState struct {
	// State is a Talos service state string: Running, Failed, Finished...
	State string
	// Healthy and HealthUnknown form the service's health.
	Healthy, HealthUnknown bool
	// Message is the health's last message.
	Message string
}

// Server is the shim.
type Server struct {
	machine.UnimplementedMachineServiceServer

	cfg  Config
	etcd *clientv3.Client
	grpc *grpc.Server
	hang atomic.Bool

	// mu guards services, the settable non-etcd services.
	mu       sync.Mutex
	services map[string]ServiceState
}

var _ machine.MachineServiceServer = (*Server)(nil)

// New builds a Server; nothing listens until Serve.
func New(cfg Config) (*Server, error) {
	if cfg.TLS == nil {
		return nil, errors.New("talos shim: TLS config is required")
	}
	if cfg.HealthTimeout == 0 {
		cfg.HealthTimeout = 500 * time.Millisecond
	}
	s := &Server{cfg: cfg, services: map[string]ServiceState{
		"kubelet": {State: "Running", Healthy: true},
		"cri":     {State: "Running", Healthy: true},
	}}
	if cfg.EtcdEndpoint != "" {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:            []string{cfg.EtcdEndpoint},
			DialTimeout:          2 * time.Second,
			DialKeepAliveTime:    10 * time.Second,
			DialKeepAliveTimeout: 2 * time.Second,
			Logger:               zap.NewNop(),
		})
		if err != nil {
			return nil, fmt.Errorf("talos shim: etcd client: %w", err)
		}
		s.etcd = c
	}
	s.grpc = grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg.TLS)), grpc.UnaryInterceptor(authorize))
	machine.RegisterMachineServiceServer(s.grpc, s)
	return s, nil
}

// Serve serves on ln until Stop.
func (s *Server) Serve(ln net.Listener) error { return s.grpc.Serve(ln) }

// Listen listens on addr (e.g. 127.0.0.1:0), serves in the background and
// returns the bound address.
func (s *Server) Listen(addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("talos shim: listen: %w", err)
	}
	go func() { _ = s.grpc.Serve(ln) }()
	return ln.Addr().String(), nil
}

// Stop stops serving and closes the etcd client.
func (s *Server) Stop() {
	s.hang.Store(false)
	s.grpc.Stop()
	if s.etcd != nil {
		_ = s.etcd.Close()
	}
}

// SetHang makes every RPC block until its caller gives up (true) or
// answers normally again (false).
func (s *Server) SetHang(h bool) { s.hang.Store(h) }

// SetService sets a non-etcd service's state (kubelet, cri, ...).
func (s *Server) SetService(id string, st ServiceState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.services[id] = st
}

func (s *Server) meta() *common.Metadata { return &common.Metadata{Hostname: s.cfg.Hostname} }

// gate blocks while in hang mode. Like a wedged apid it does not even
// answer when the caller's deadline passes: the client has to give up on
// its own.
func (s *Server) gate(ctx context.Context) error {
	for s.hang.Load() {
		time.Sleep(50 * time.Millisecond)
	}
	return ctx.Err()
}

func (s *Server) requireEtcd() error {
	if s.etcd == nil {
		// machined's CheckControlplane on a worker.
		return status.Error(codes.FailedPrecondition, "etcd is not available on a worker node")
	}
	return nil
}

// ServiceList implements machine.MachineServiceServer.
func (s *Server) ServiceList(ctx context.Context, _ *emptypb.Empty) (*machine.ServiceListResponse, error) {
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	var infos []*machine.ServiceInfo
	if s.etcd != nil {
		infos = append(infos, s.etcdService(ctx))
	}
	s.mu.Lock()
	for _, id := range []string{"apid", "containerd", "cri", "kubelet", "machined", "trustd"} {
		st, ok := s.services[id]
		if !ok {
			st = ServiceState{State: "Running", Healthy: true}
		}
		infos = append(infos, serviceInfo(id, st))
	}
	s.mu.Unlock()
	return &machine.ServiceListResponse{Messages: []*machine.ServiceList{{Metadata: s.meta(), Services: infos}}}, nil
}

// etcdService derives the etcd service like machined: Running while the
// member process answers; healthy when it has quorum (a linearizable read
// succeeds, as client.ValidateQuorum does).
func (s *Server) etcdService(ctx context.Context) *machine.ServiceInfo {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.HealthTimeout)
	defer cancel()
	if _, err := s.etcd.Status(pctx, s.cfg.EtcdEndpoint); err != nil {
		return serviceInfo("etcd", ServiceState{State: "Failed", Message: fmt.Sprintf("etcd member unreachable: %v", err)})
	}
	if _, err := s.etcd.Get(pctx, "health"); err != nil {
		return serviceInfo("etcd", ServiceState{State: "Running", Healthy: false, Message: fmt.Sprintf("quorum check failed: %v", err)})
	}
	return serviceInfo("etcd", ServiceState{State: "Running", Healthy: true})
}

func serviceInfo(id string, st ServiceState) *machine.ServiceInfo {
	now := timestamppb.Now()
	return &machine.ServiceInfo{
		Id:    id,
		State: st.State,
		Events: &machine.ServiceEvents{Events: []*machine.ServiceEvent{
			{Msg: "Service " + st.State, State: st.State, Ts: now},
		}},
		Health: &machine.ServiceHealth{Unknown: st.HealthUnknown, Healthy: st.Healthy, LastMessage: st.Message, LastChange: now},
	}
}

// EtcdMemberList implements machine.MachineServiceServer.
func (s *Server) EtcdMemberList(ctx context.Context, _ *machine.EtcdMemberListRequest) (*machine.EtcdMemberListResponse, error) {
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	if err := s.requireEtcd(); err != nil {
		return nil, err
	}
	resp, err := s.etcd.MemberList(clientv3.WithRequireLeader(ctx))
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "etcd member list: %v", err)
	}
	out := &machine.EtcdMembers{Metadata: s.meta()}
	for _, m := range resp.Members {
		out.Members = append(out.Members, &machine.EtcdMember{
			Id: m.ID, Hostname: m.Name, PeerUrls: m.PeerURLs, ClientUrls: m.ClientURLs, IsLearner: m.IsLearner,
		})
		out.LegacyMembers = append(out.LegacyMembers, m.Name)
	}
	return &machine.EtcdMemberListResponse{Messages: []*machine.EtcdMembers{out}}, nil
}

// EtcdStatus implements machine.MachineServiceServer.
func (s *Server) EtcdStatus(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdStatusResponse, error) {
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	if err := s.requireEtcd(); err != nil {
		return nil, err
	}
	st, err := s.etcd.Status(ctx, s.cfg.EtcdEndpoint)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "etcd status: %v", err)
	}
	ms := &machine.EtcdMemberStatus{
		MemberId:         st.Header.GetMemberId(),
		ProtocolVersion:  st.Version,
		DbSize:           st.DbSize,
		DbSizeInUse:      st.DbSizeInUse,
		Leader:           st.Leader,
		RaftIndex:        st.RaftIndex,
		RaftTerm:         st.RaftTerm,
		RaftAppliedIndex: st.RaftAppliedIndex,
		Errors:           st.Errors,
		IsLearner:        st.IsLearner,
		StorageVersion:   st.StorageVersion,
	}
	return &machine.EtcdStatusResponse{Messages: []*machine.EtcdStatus{{Metadata: s.meta(), MemberStatus: ms}}}, nil
}

// EtcdAlarmList implements machine.MachineServiceServer.
func (s *Server) EtcdAlarmList(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdAlarmListResponse, error) {
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	if err := s.requireEtcd(); err != nil {
		return nil, err
	}
	resp, err := s.etcd.AlarmList(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "etcd alarm list: %v", err)
	}
	out := &machine.EtcdAlarm{Metadata: s.meta()}
	for _, a := range resp.Alarms {
		out.MemberAlarms = append(out.MemberAlarms, &machine.EtcdMemberAlarm{
			MemberId: a.MemberID,
			Alarm:    machine.EtcdMemberAlarm_AlarmType(a.Alarm),
		})
	}
	return &machine.EtcdAlarmListResponse{Messages: []*machine.EtcdAlarm{out}}, nil
}

// Version implements machine.MachineServiceServer.
func (s *Server) Version(ctx context.Context, _ *emptypb.Empty) (*machine.VersionResponse, error) {
	if err := s.gate(ctx); err != nil {
		return nil, err
	}
	return &machine.VersionResponse{Messages: []*machine.Version{{
		Metadata: s.meta(),
		Version:  &machine.VersionInfo{Tag: "v1.13.0", Os: "linux", Arch: "amd64"},
		Platform: &machine.PlatformInfo{Name: "cozy-health-shim", Mode: "container"},
		Features: &machine.FeaturesInfo{Rbac: true},
	}}}, nil
}
