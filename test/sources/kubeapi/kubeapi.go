// Package kubeapi serves the one Kubernetes API read the agent makes (GET
// /api/v1/nodes/NAME of its own Node, as PartialObjectMetadata) over TLS,
// with bodies marshalled from the upstream metav1 types and kube-apiserver's
// Status answers for a refused token or a forbidden read. Tests that need
// the whole API use the real kube-apiserver (test/harness).
package kubeapi

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Token is the bearer token the server accepts.
const Token = "agent-token"

// Server is the Node endpoint.
type Server struct {
	// URL is the server's base URL.
	URL string
	// CAFile verifies it.
	CAFile string
	// Gets counts the requests.
	Gets atomic.Int32

	srv *httptest.Server
	// mu guards nodes: node name -> labels.
	mu    sync.Mutex
	nodes map[string]map[string]string
}

// Start serves until Close; dir holds the CA file.
func Start(dir string) (*Server, error) {
	s := &Server{nodes: map[string]map[string]string{}}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	s.CAFile = filepath.Join(dir, "kube-ca.crt")
	if err := os.WriteFile(s.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw}), 0o600); err != nil {
		s.srv.Close()
		return nil, fmt.Errorf("kubeapi: write CA: %w", err)
	}
	return s, nil
}

// Close stops serving.
func (s *Server) Close() { s.srv.Close() }

// SetNode creates or replaces a Node with labels.
func (s *Server) SetNode(name string, labels map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[name] = labels
}

// WriteToken writes Token to path.
func WriteToken(path string) error { return os.WriteFile(path, []byte(Token+"\n"), 0o600) }

func status(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code)})
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.Gets.Add(1)
	if r.Header.Get("Authorization") != "Bearer "+Token {
		status(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, "/api/v1/nodes/")
	s.mu.Lock()
	labels, found := s.nodes[name]
	s.mu.Unlock()
	if !ok || r.Method != http.MethodGet {
		status(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource")
		return
	}
	if !found {
		status(w, http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf("nodes %q not found", name))
		return
	}
	obj := metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: "6f1c1e5e-1111-4c4c-9d9d-000000000001", ResourceVersion: "1", Labels: labels}}
	if strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadata") {
		w.Header().Set("Content-Type", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1")
	} else {
		obj.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
		w.Header().Set("Content-Type", "application/json")
	}
	_ = json.NewEncoder(w).Encode(&obj)
}
