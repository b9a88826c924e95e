package drainserver

import (
	"encoding/json"
	"errors"
	"net/http"

	"go.uber.org/zap"

	"github.com/cozystack/cozy-health/aggregator/internal/delegated"
	"github.com/cozystack/cozy-health/aggregator/internal/drain"
	"github.com/cozystack/cozy-health/pkg/drainapi"
)

// Handler serves GET /v1/drain-check?node=X[&intent=reboot|decommission]
// (default reboot) as JSON:
// {"node","verdict":"safe|blocked|unknown","reasons":[...],"evaluatedAt","snapshotAt"}.
// 400 on a missing or invalid node or an intent that is neither, 404 when the node is neither a
// Kubernetes Node nor in the state, 405 on other methods, 401/403 when an
// Authorizer is set and refuses the caller, 429 when its review budget is
// spent, 503 when it cannot ask.
type Handler struct {
	svc  *Service
	auth *Authorizer
}

// NewHandler returns the HTTP front end of svc. auth may be nil: no
// authentication beyond what the listener has (see Authorizer).
func NewHandler(svc *Service, auth *Authorizer) *Handler {
	return &Handler{svc: svc, auth: auth}
}

// Mount registers the handler on mux at Path.
func (h *Handler) Mount(mux *http.ServeMux) { mux.Handle(Path, h) }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.svc.reject("http", "method", r.URL.Query().Get("node"))
		w.Header().Set("Allow", "GET, HEAD")
		writeJSON(w, http.StatusMethodNotAllowed, drainapi.Error{Error: "method " + r.Method + " not allowed"})
		return
	}
	if !authorizeHTTP(h.svc, h.auth, w, r, "http") {
		return
	}
	intent, err := drain.ParseIntent(r.URL.Query().Get("intent"))
	if err != nil {
		h.svc.reject("http", "invalid_intent", r.URL.Query().Get("node"))
		writeJSON(w, http.StatusBadRequest, drainapi.Error{Error: err.Error()})
		return
	}
	res, err := h.svc.CheckIntent(r.URL.Query().Get("node"), "http", intent)
	switch {
	case errors.Is(err, errInvalidNode):
		writeJSON(w, http.StatusBadRequest, drainapi.Error{Error: err.Error()})
	case errors.Is(err, errNodeNotFound):
		writeJSON(w, http.StatusNotFound, drainapi.Error{Error: err.Error()})
	case err != nil:
		writeJSON(w, http.StatusInternalServerError, drainapi.Error{Error: err.Error()})
	default:
		writeJSON(w, http.StatusOK, res.API())
	}
}

// authorizeHTTP checks the caller with auth (nil: no check) and answers
// 401/403/429/503 itself when it refuses; via labels the rejections.
func authorizeHTTP(svc *Service, auth *Authorizer, w http.ResponseWriter, r *http.Request, via string) bool {
	if auth == nil {
		return true
	}
	user, err := auth.Authorize(r.Context(), delegated.BearerToken(r.Header.Get("Authorization")), r.RemoteAddr)
	switch {
	case errors.Is(err, delegated.ErrUnauthenticated):
		svc.reject(via, "unauthenticated", r.URL.Query().Get("node"))
		w.Header().Set("WWW-Authenticate", `Bearer realm="cozy-health"`)
		writeJSON(w, http.StatusUnauthorized, drainapi.Error{Error: err.Error()})
		return false
	case errors.Is(err, delegated.ErrForbidden):
		svc.reject(via, "forbidden", r.URL.Query().Get("node"))
		writeJSON(w, http.StatusForbidden, drainapi.Error{Error: err.Error()})
		return false
	case errors.Is(err, delegated.ErrThrottled):
		svc.reject(via, "throttled", r.URL.Query().Get("node"))
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusTooManyRequests, drainapi.Error{Error: err.Error()})
		return false
	case err != nil:
		svc.log.Error("drain check authorization failed", zap.Error(err))
		writeJSON(w, http.StatusServiceUnavailable, drainapi.Error{Error: "cannot authorize: " + err.Error()})
		return false
	}
	svc.log.Debug("drain check authorized", zap.String("user", user), zap.String("via", via))
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
