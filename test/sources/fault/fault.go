// Package fault is the misbehaviour every source stand-in can be switched
// to: answer slowly, hang until the client gives up, or answer garbage.
package fault

import (
	"net/http"
	"sync"
	"time"
)

// Mode is a source's misbehaviour.
type Mode int

// The modes.
const (
	// Normal answers with the real payload.
	Normal Mode = iota
	// Hang never answers (until the client goes away).
	Hang
	// Garbage answers 200 with a body that is not the payload's format.
	Garbage
)

// Switch holds a source's current mode and delay; the zero value is Normal.
type Switch struct {
	mu    sync.Mutex // guards mode and delay
	mode  Mode
	delay time.Duration
}

// Set sets the mode.
func (s *Switch) Set(m Mode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mode = m
}

// SetDelay delays every answer by d.
func (s *Switch) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// Apply misbehaves on w/r as set; it returns true when the caller must not
// answer normally.
func (s *Switch) Apply(w http.ResponseWriter, r *http.Request) bool {
	s.mu.Lock()
	mode, delay := s.mode, s.delay
	s.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return true
		}
	}
	switch mode {
	case Hang:
		<-r.Context().Done()
		return true
	case Garbage:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("\x00\x1f<html>502 Bad Gateway</html>{{{"))
		return true
	}
	return false
}
