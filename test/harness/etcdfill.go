package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdFillPrefix is where EtcdFill writes and EtcdShrink deletes.
const EtcdFillPrefix = "/cozy-health-fill/"

// etcdFillValue is the size of one filling write: small against the quotas
// the tests and the lab use (16-64 MiB), so filling stops close to its
// target and never overshoots into the quota by accident.
const etcdFillValue = 256 << 10

func etcdClient(endpoints []string) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return c, nil
}

// EtcdFill writes real keys under EtcdFillPrefix through endpoints until
// the database of every member at endpoints is at least target bytes (as
// etcd's Status reports dbSize; replicated, but a follower's backend may
// trail or differ by pages). It returns the smallest dbSize reached. A write etcd refuses
// (NOSPACE: the quota is reached) is returned as an error.
func EtcdFill(ctx context.Context, endpoints []string, target int64) (int64, error) {
	c, err := etcdClient(endpoints)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	val := string(bytes.Repeat([]byte("x"), etcdFillValue))
	for i := 0; ; {
		// Every member's database must reach the target: the agents judge
		// each member's own size, and a follower's backend can be smaller
		// than the member the writes went to (it was measured on the first
		// endpoint alone, and one member read Healthy in a CI run).
		var st struct{ DbSize int64 }
		for k, ep := range endpoints {
			s, err := c.Status(ctx, ep)
			if err != nil {
				return 0, fmt.Errorf("etcd status of %s: %w", ep, err)
			}
			if k == 0 || s.DbSize < st.DbSize {
				st.DbSize = s.DbSize
			}
		}
		if st.DbSize >= target {
			return st.DbSize, nil
		}
		// dbSize moves when etcd commits its backend batch (every 100 ms),
		// not at every put: write about 3/4 of what is missing, wait for
		// the commit, look again. Each value grows the database by at least
		// its size, so this never overshoots by more than one value.
		burst := max(1, int((target-st.DbSize)*3/4/etcdFillValue))
		for range burst {
			if _, err := c.Put(ctx, fmt.Sprintf("%s%08d", EtcdFillPrefix, i), val); err != nil {
				return st.DbSize, fmt.Errorf("etcd put (db %d of target %d bytes): %w", st.DbSize, target, err)
			}
			i++
		}
		select {
		case <-ctx.Done():
			return st.DbSize, ctx.Err()
		case <-time.After(150 * time.Millisecond):
		}
	}
}

// EtcdShrink undoes EtcdFill the way an operator would: it deletes the
// keys, compacts the history to the current revision and defragments every
// member (one at a time), then disarms a NOSPACE alarm if one was raised.
// It returns each member's dbSize after the defragmentation.
func EtcdShrink(ctx context.Context, endpoints []string) ([]int64, error) {
	c, err := etcdClient(endpoints)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	del, err := c.Delete(ctx, EtcdFillPrefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("etcd delete %s: %w", EtcdFillPrefix, err)
	}
	if _, err := c.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		return nil, fmt.Errorf("etcd compact to %d: %w", del.Header.Revision, err)
	}
	var sizes []int64
	for _, ep := range endpoints {
		if _, err := c.Defragment(ctx, ep); err != nil {
			return nil, fmt.Errorf("etcd defragment %s: %w", ep, err)
		}
		st, err := c.Status(ctx, ep)
		if err != nil {
			return nil, fmt.Errorf("etcd status of %s: %w", ep, err)
		}
		sizes = append(sizes, st.DbSize)
	}
	if err := EtcdDisarmAll(ctx, c); err != nil {
		return sizes, err
	}
	return sizes, nil
}

// EtcdDisarmAll disarms every active alarm (etcdctl alarm disarm).
func EtcdDisarmAll(ctx context.Context, c *clientv3.Client) error {
	al, err := c.AlarmList(ctx)
	if err != nil {
		return fmt.Errorf("etcd alarm list: %w", err)
	}
	for _, a := range al.Alarms {
		if _, err := c.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: a.MemberID, Alarm: a.Alarm}); err != nil {
			return fmt.Errorf("etcd alarm disarm %s on %x: %w", a.Alarm, a.MemberID, err)
		}
	}
	return nil
}

// clientVia is a client of every running member but skip.
func (c *EtcdCluster) clientVia(skip int) (*clientv3.Client, error) {
	var eps []string
	for j, m := range c.Members {
		if j != skip && c.Pid(j) != 0 {
			eps = append(eps, m.ClientURL)
		}
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("no running etcd member besides %d", skip)
	}
	return etcdClient(eps)
}

// MemberID is member i's ID as the cluster lists it (0 when not listed).
func (c *EtcdCluster) MemberID(ctx context.Context, i int) (uint64, error) {
	cli, err := c.clientVia(-1)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return 0, fmt.Errorf("etcd member list: %w", err)
	}
	for _, m := range resp.Members {
		for _, u := range m.PeerURLs {
			if u == c.Members[i].PeerURL {
				return m.ID, nil
			}
		}
	}
	return 0, nil
}

// PromoteMember promotes learner i to a voting member (etcdctl member
// promote), retrying while etcd says the learner has not caught up.
func (c *EtcdCluster) PromoteMember(ctx context.Context, i int) error {
	id, err := c.MemberID(ctx, i)
	if err != nil {
		return err
	}
	cli, err := c.clientVia(-1)
	if err != nil {
		return err
	}
	defer cli.Close()
	for {
		_, err = cli.MemberPromote(ctx, id)
		if err == nil {
			c.mu.Lock()
			c.Members[i].Learner = false
			c.mu.Unlock()
			return nil
		}
		if !strings.Contains(err.Error(), "not in sync") && !strings.Contains(err.Error(), "not ready") {
			return fmt.Errorf("etcd member promote %s: %w", c.Members[i].Name, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd member promote %s: %w (last: %w)", c.Members[i].Name, ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// RemoveMember removes member i from the cluster (etcdctl member remove)
// through the others; the removed member's process exits on its own (etcd
// stops a member it learns was removed), or is stopped after 10 s. Its data
// directory is deleted: it cannot rejoin with it.
func (c *EtcdCluster) RemoveMember(ctx context.Context, i int) error {
	id, err := c.MemberID(ctx, i)
	if err != nil {
		return err
	}
	cli, err := c.clientVia(i)
	if err != nil {
		return err
	}
	defer cli.Close()
	if _, err := cli.MemberRemove(ctx, id); err != nil {
		return fmt.Errorf("etcd member remove %s: %w", c.Members[i].Name, err)
	}
	c.mu.Lock()
	p := c.Members[i].proc
	c.Members[i].proc = nil
	c.mu.Unlock()
	if p != nil {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.stop()
		}
	}
	return os.RemoveAll(c.Members[i].DataDir)
}

// ReAddMember adds removed member i back (etcdctl member add) as a voting
// member with an empty data directory, starts it with
// initial-cluster-state=existing and waits until it is healthy.
func (c *EtcdCluster) ReAddMember(ctx context.Context, i int) error {
	m := c.Members[i]
	cli, err := c.clientVia(i)
	if err != nil {
		return err
	}
	defer cli.Close()
	resp, err := cli.MemberAdd(ctx, []string{m.PeerURL})
	if err != nil {
		return fmt.Errorf("etcd member add %s: %w", m.Name, err)
	}
	var initial []string
	for _, mm := range resp.Members {
		name := mm.Name
		if mm.ID == resp.Member.ID {
			name = m.Name
		}
		for _, u := range mm.PeerURLs {
			initial = append(initial, name+"="+u)
		}
	}
	extra := c.extra
	m.args = append(memberArgs(m, initial, "existing"), extra...)
	m.Learner = false
	if err := c.spawn(m); err != nil {
		return err
	}
	return c.WaitHealthy(ctx, i)
}
