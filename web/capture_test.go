package web_test

import (
	"context"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/web"
)

// fakeCaptures is a tandem.CaptureService that records its calls.
type fakeCaptures struct {
	calls
	Err error
}

var _ tandem.CaptureService = (*fakeCaptures)(nil)

func (f *fakeCaptures) StartCapture(ctx context.Context, pod string, req tandem.CaptureRequest) (*tandem.CaptureInfo, error) {
	f.record("StartCapture", req)
	if f.Err != nil {
		return nil, f.Err
	}
	return &tandem.CaptureInfo{ID: "cap-1", Pod: pod, State: tandem.CaptureRunning, Reason: req.Reason, Actor: req.Actor,
		StartedAt: at, Duration: req.Duration.String(), MaxOps: req.MaxOps}, nil
}

func (f *fakeCaptures) Captures(ctx context.Context) ([]tandem.CaptureInfo, error) {
	f.record("Captures", nil)
	return nil, f.Err
}

func (f *fakeCaptures) OpenCapture(ctx context.Context, id string) (io.ReadCloser, *tandem.CaptureInfo, error) {
	f.record("OpenCapture", id)
	if f.Err != nil {
		return nil, nil, f.Err
	}
	if id != "cap-1" {
		return nil, nil, tandem.Errorf(tandem.ENOTFOUND, "no capture %q", id)
	}
	return io.NopCloser(strings.NewReader("zstd bytes")), &tandem.CaptureInfo{ID: id}, nil
}

func newCaptureAdmin(t *testing.T) (http.Handler, *fakeCaptures) {
	t.Helper()
	c := &fakeCaptures{}
	h, _ := newAdmin(t, func(s *web.AdminServer) { s.Captures = c })
	return h, c
}

func TestCaptureRoutes(t *testing.T) {
	t.Run("Start", func(t *testing.T) {
		h, c := newCaptureAdmin(t)
		got := mustJSON(t, do(t, h, req{method: "POST", target: "/admin/pods/pod-a/capture", token: adminToken,
			body: `{"reason":"flash sale","actor":"alice","duration":"10m","max_ops":5000}`}), http.StatusOK)
		if got["id"] != "cap-1" || got["state"] != "running" || got["duration"] != "10m0s" {
			t.Errorf("got %v", got)
		}
		want := tandem.CaptureRequest{Change: tandem.Change{Actor: "alice", Reason: "flash sale"}, Duration: 10 * time.Minute, MaxOps: 5000}
		if !reflect.DeepEqual(c.Last(), want) {
			t.Errorf("got request %+v, want %+v", c.Last(), want)
		}
	})
	t.Run("List", func(t *testing.T) {
		h, _ := newCaptureAdmin(t)
		got := mustJSON(t, do(t, h, req{method: "GET", target: "/admin/captures", token: adminToken}), http.StatusOK)
		if list, ok := got["captures"].([]any); !ok || len(list) != 0 {
			t.Errorf("got %v, want an empty array", got)
		}
	})
	t.Run("Download", func(t *testing.T) {
		h, _ := newCaptureAdmin(t)
		w := do(t, h, req{method: "GET", target: "/admin/captures/cap-1", token: adminToken})
		if w.Code != http.StatusOK || w.Body.String() != "zstd bytes" ||
			w.Header().Get("Content-Disposition") != `attachment; filename="cap-1.tcap"` {
			t.Errorf("got %d %q %v", w.Code, w.Body.String(), w.Header())
		}
		mustError(t, do(t, h, req{method: "GET", target: "/admin/captures/cap-2", token: adminToken}), http.StatusNotFound, tandem.ENOTFOUND)
	})
	t.Run("ErrInvalid", func(t *testing.T) {
		h, c := newCaptureAdmin(t)
		for _, body := range []string{
			`{"reason":"r"}`,
			`{"reason":"r","duration":"soon"}`,
			`{"reason":"r","duration":"-1m"}`,
			`{"reason":"r","duration":"25h"}`,
			`{"reason":"r","duration":"1m","max_ops":0}`,
			`{"duration":"1m"}`,
			`{"reason":"r","duration":"1m","extra":1}`,
		} {
			mustError(t, do(t, h, req{method: "POST", target: "/admin/pods/pod-a/capture", token: adminToken, body: body}),
				http.StatusBadRequest, tandem.EINVALID)
		}
		mustError(t, do(t, h, req{method: "GET", target: "/admin/captures/..%2Fetc", token: adminToken}), http.StatusBadRequest, tandem.EINVALID)
		if n := len(c.Names()); n != 0 {
			t.Errorf("got calls %v for bad input, want none", c.Names())
		}
	})
	t.Run("ErrConflict", func(t *testing.T) {
		h, c := newCaptureAdmin(t)
		c.Err = tandem.Errorf(tandem.ECONFLICT, "a capture runs")
		mustError(t, do(t, h, req{method: "POST", target: "/admin/pods/pod-a/capture", token: adminToken,
			body: `{"reason":"r","duration":"1m"}`}), http.StatusConflict, tandem.ECONFLICT)
	})
	t.Run("ViewerCannotStart", func(t *testing.T) {
		c := &fakeCaptures{}
		h, _ := newAdmin(t, func(s *web.AdminServer) { s.Captures = c; s.ViewerToken = "viewer-token" })
		mustError(t, do(t, h, req{method: "POST", target: "/admin/pods/pod-a/capture", token: "viewer-token",
			body: `{"reason":"r","duration":"1m"}`}), http.StatusForbidden, tandem.EFORBIDDEN)
		if n := len(c.Names()); n != 0 {
			t.Errorf("got calls %v, want none", c.Names())
		}
	})
	t.Run("NoCaptures", func(t *testing.T) {
		h, _ := newAdmin(t)
		mustError(t, do(t, h, req{method: "GET", target: "/admin/captures", token: adminToken}), http.StatusNotFound, tandem.ENOTFOUND)
	})
}
