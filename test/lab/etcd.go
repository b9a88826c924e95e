package lab

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdMember is one member of the management etcd under observation.
type etcdMember struct {
	Name       string `json:"name"`
	ClientURL  string `json:"clientURL"`
	PeerURL    string `json:"peerURL"`
	MetricsURL string `json:"metricsURL"`
	Learner    bool   `json:"learner"`
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func freeAddr() (string, error) {
	p, err := freePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(p), nil
}

func newEtcdMember(name string, learner bool) (etcdMember, error) {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return etcdMember{}, err
		}
		ports[i] = p
	}
	return etcdMember{
		Name:       name,
		ClientURL:  fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		PeerURL:    fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		MetricsURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2]),
		Learner:    learner,
	}, nil
}

// etcdArgs is the command line of one member. initialCluster lists the
// members the new member must know of; state is "new" or "existing".
func etcdArgs(bin, dir string, m etcdMember, initialCluster []etcdMember, state string) []string {
	var ic []string
	for _, o := range initialCluster {
		ic = append(ic, o.Name+"="+o.PeerURL)
	}
	return []string{
		bin,
		"--name=" + m.Name,
		"--data-dir=" + filepath.Join(dir, "etcd", m.Name),
		"--listen-client-urls=" + m.ClientURL,
		"--advertise-client-urls=" + m.ClientURL,
		"--listen-peer-urls=" + m.PeerURL,
		"--initial-advertise-peer-urls=" + m.PeerURL,
		"--listen-metrics-urls=" + m.MetricsURL,
		"--initial-cluster=" + strings.Join(ic, ","),
		"--initial-cluster-state=" + state,
		"--initial-cluster-token=cozy-health-lab",
		// Real fsync: the lab's fsync-slow fault reports through etcd's own
		// WAL fsync histogram.
		"--heartbeat-interval=100",
		"--election-timeout=1000",
		"--log-level=warn",
	}
}

// waitEtcdHealthy waits until the member answers /health with a leader.
func waitEtcdHealthy(ctx context.Context, m etcdMember) error {
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(m.MetricsURL + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for etcd member %s: %w", m.Name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// startEtcdCluster starts the voting members together, then adds each
// remaining member as a learner (or a voter when votersBeyond) one at a time.
func startEtcdCluster(ctx context.Context, bin, dir string, names []string, voters int, learnersAsVoters, detach bool) ([]etcdMember, []*Proc, error) {
	if voters > len(names) {
		voters = len(names)
	}
	members := make([]etcdMember, 0, len(names))
	for i, n := range names {
		m, err := newEtcdMember(n, i >= voters && !learnersAsVoters)
		if err != nil {
			return nil, nil, err
		}
		members = append(members, m)
	}
	if err := os.MkdirAll(filepath.Join(dir, "etcd"), 0o700); err != nil {
		return nil, nil, fmt.Errorf("create etcd dir: %w", err)
	}
	var procs []*Proc
	initial := members[:voters]
	for _, m := range initial {
		p, err := startProc(dir, "etcd-"+m.Name, etcdArgs(bin, dir, m, initial, "new"), detach)
		if err != nil {
			return nil, procs, err
		}
		procs = append(procs, p)
	}
	for _, m := range initial {
		if err := waitEtcdHealthy(ctx, m); err != nil {
			return nil, procs, err
		}
	}
	if len(members) == voters {
		return members, procs, nil
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{initial[0].ClientURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, procs, fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	known := append([]etcdMember(nil), initial...)
	for _, m := range members[voters:] {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if m.Learner {
			_, err = cli.MemberAddAsLearner(actx, []string{m.PeerURL})
		} else {
			_, err = cli.MemberAdd(actx, []string{m.PeerURL})
		}
		cancel()
		if err != nil {
			return nil, procs, fmt.Errorf("add etcd member %s: %w", m.Name, err)
		}
		known = append(known, m)
		p, err := startProc(dir, "etcd-"+m.Name, etcdArgs(bin, dir, m, known, "existing"), detach)
		if err != nil {
			return nil, procs, err
		}
		procs = append(procs, p)
		if err := waitEtcdHealthy(ctx, m); err != nil {
			return nil, procs, err
		}
	}
	return members, procs, nil
}
