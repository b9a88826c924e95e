package state

import "time"

// LeaseAlive tells whether the kubelet Lease the facts carry was renewed
// within its duration at now; known is false when no Lease was seen.
func (k KubeFacts) LeaseAlive(now time.Time) (alive, known bool) {
	if k.LeaseRenewedAt.IsZero() {
		return false, false
	}
	return !now.After(k.LeaseExpiry()), true
}

// LeaseExpiry is the instant after which the kubelet Lease counts as not
// renewed: RenewedAt + Duration. Zero when no Lease was seen.
func (k KubeFacts) LeaseExpiry() time.Time {
	if k.LeaseRenewedAt.IsZero() {
		return time.Time{}
	}
	return k.LeaseRenewedAt.Add(k.LeaseDuration)
}

// InMaintenance tells whether the node is in planned maintenance: cordoned.
func (k KubeFacts) InMaintenance() bool { return k.Cordoned }

// SetKubeletLease records the renewal of node name's kubelet Lease
// (kube-node-lease/<name>: spec.renewTime, spec.leaseDurationSeconds),
// seen at now. A renewal of a Lease that was alive at now, and still is,
// is stored without counting as a change of the state: a kubelet renews
// every 10 s, and nothing judged from the Lease changes until it stops
// (the rollup wakes at LeaseExpiry, as it does at a heartbeat's grace).
// A Lease that comes alive again, or appears, is a change.
func (s *State) SetKubeletLease(name string, renewedAt time.Time, duration time.Duration, now time.Time) {
	s.setKube(name, now, func(k *KubeFacts) {
		k.LeaseRenewedAt, k.LeaseDuration = renewedAt, duration
	})
}

// ForgetKubeletLease drops node name's kubelet Lease (it was deleted).
func (s *State) ForgetKubeletLease(name string, now time.Time) {
	s.setKube(name, now, func(k *KubeFacts) {
		k.LeaseRenewedAt, k.LeaseDuration = time.Time{}, 0
	})
}

// SetCordoned records whether node name's Node is cordoned
// (spec.unschedulable), seen at now: the start of a maintenance is when
// this replica first saw it cordoned.
func (s *State) SetCordoned(name string, cordoned, byTalos bool, now time.Time) {
	s.setKube(name, now, func(k *KubeFacts) {
		if cordoned && !k.Cordoned {
			k.MaintenanceSince = now
		}
		if !cordoned {
			k.MaintenanceSince = time.Time{}
		}
		k.Cordoned, k.TalosCordoned = cordoned, cordoned && byTalos
	})
}

// setKube applies f to node name's KubeFacts (kept for nodes not in the
// state too) and to its entry; a change of anything judged at now (the
// cordon, the Lease's liveness or presence) counts as a change of the
// state.
func (s *State) setKube(name string, now time.Time, f func(*KubeFacts)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.kube[name]
	next := old
	f(&next)
	if next == old {
		return
	}
	s.kube[name] = next
	e, ok := s.nodes[name]
	if !ok {
		return
	}
	e.Kube = next
	s.nodes[name] = e
	oldAlive, oldKnown := old.LeaseAlive(now)
	newAlive, newKnown := next.LeaseAlive(now)
	if old.Cordoned != next.Cordoned || old.TalosCordoned != next.TalosCordoned || oldAlive != newAlive || oldKnown != newKnown {
		s.changed(name)
	}
}
