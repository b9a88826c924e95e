package harness

import (
	"bytes"
	"context"
	"fmt"
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
// the database of the member at endpoints[0] is at least target bytes (as
// etcd's Status reports dbSize; it is replicated, so every member grows
// alike). It returns the member's dbSize reached. A write etcd refuses
// (NOSPACE: the quota is reached) is returned as an error.
func EtcdFill(ctx context.Context, endpoints []string, target int64) (int64, error) {
	c, err := etcdClient(endpoints)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	val := string(bytes.Repeat([]byte("x"), etcdFillValue))
	for i := 0; ; i++ {
		st, err := c.Status(ctx, endpoints[0])
		if err != nil {
			return 0, fmt.Errorf("etcd status of %s: %w", endpoints[0], err)
		}
		if st.DbSize >= target {
			return st.DbSize, nil
		}
		if _, err := c.Put(ctx, fmt.Sprintf("%s%08d-%d", EtcdFillPrefix, i, time.Now().UnixNano()), val); err != nil {
			return st.DbSize, fmt.Errorf("etcd put (db %d of target %d bytes): %w", st.DbSize, target, err)
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
