package web

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/tandemhq/tandem"
)

// Role is what a token of the admin API may do.
type Role string

// Roles of the admin API. A viewer reads (GET and HEAD of every admin
// route, /metrics and the dashboard's views) and changes nothing; an admin
// does everything.
const (
	RoleNone   Role = ""
	RoleViewer Role = "viewer"
	RoleAdmin  Role = "admin"
)

// CanChange reports whether the role may make changes.
func (r Role) CanChange() bool { return r == RoleAdmin }

// roleKey is the context key of the caller's role.
type roleKey struct{}

// RoleFrom returns the role of the token the request was authorized with.
func RoleFrom(ctx context.Context) Role {
	r, _ := ctx.Value(roleKey{}).(Role)
	return r
}

// tokens holds the hashes of the admin API's tokens, so that comparing
// takes the same time whatever the length of the token presented.
type tokens struct {
	admin, viewer       [32]byte
	hasAdmin, hasViewer bool
}

func newTokens(admin, viewer string) tokens {
	return tokens{
		admin: sha256.Sum256([]byte(admin)), viewer: sha256.Sum256([]byte(viewer)),
		hasAdmin: admin != "", hasViewer: viewer != "" && viewer != admin,
	}
}

// role returns the role of the bearer token of r, RoleNone when it has
// none or a wrong one. Both comparisons always run, in constant time.
func (t tokens) role(r *http.Request) Role {
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return RoleNone
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
	isAdmin := subtle.ConstantTimeCompare(sum[:], t.admin[:]) == 1
	isViewer := subtle.ConstantTimeCompare(sum[:], t.viewer[:]) == 1
	switch {
	case isAdmin && t.hasAdmin:
		return RoleAdmin
	case isViewer && t.hasViewer:
		return RoleViewer
	}
	return RoleNone
}

// readOnly reports whether a method only reads.
func readOnly(method string) bool {
	return method == http.MethodGet || method == http.MethodHead
}

// requireRole answers 401 without a known token and 403 forbidden to a
// viewer asking for a change; otherwise it puts the role in the context.
func (t tokens) requireRole(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		role := t.role(r)
		switch {
		case role == RoleNone:
			unauthorized(w, r)
			return
		case !role.CanChange() && !readOnly(r.Method):
			if a := accessFrom(r.Context()); a != nil {
				a.role = role
			}
			forbidden(w, r)
			return
		}
		if a := accessFrom(r.Context()); a != nil {
			a.role = role
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), roleKey{}, role)))
	})
}

func forbidden(w http.ResponseWriter, r *http.Request) {
	writeError(w, r, zap.NewNop(), tandem.Errorf(tandem.EFORBIDDEN, "the viewer token is read-only; changes need the admin token"))
}

// defaultActor names who made a change when neither the body nor the
// X-Actor header does: the token's role and the client's address, so that
// the audit log never says "unknown".
func defaultActor(r *http.Request) string {
	role := RoleFrom(r.Context())
	if role == RoleNone {
		role = RoleAdmin
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil || host == "" {
		host = r.RemoteAddr
	}
	if host == "" {
		return string(role) + "-token"
	}
	return string(role) + "-token@" + host
}

// whoamiBody answers GET /admin/whoami.
type whoamiBody struct {
	Role      Role `json:"role"`
	CanChange bool `json:"can_change"`
}

// whoami tells the dashboard which token it holds, so that a viewer sees
// no change buttons.
func whoami(w http.ResponseWriter, r *http.Request) {
	role := RoleFrom(r.Context())
	writeJSON(w, http.StatusOK, whoamiBody{Role: role, CanChange: role.CanChange()})
}
