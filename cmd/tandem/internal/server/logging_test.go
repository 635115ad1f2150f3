package server

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/internal/cli"
)

func TestLogging(t *testing.T) {
	t.Run("ISO8601Times", func(t *testing.T) {
		for _, format := range []string{"json", "console"} {
			var buf bytes.Buffer
			newLogger(format, zapcore.InfoLevel, &buf).Info("hello")
			if !regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d{4})`).MatchString(buf.String()) {
				t.Errorf("%s: got %q, want an ISO 8601 time", format, buf.String())
			}
		}
	})
	t.Run("LogLevelFlag", func(t *testing.T) {
		m := NewMain()
		m.Stderr = &bytes.Buffer{}
		if err := m.ParseFlags([]string{"--log-level", "warn"}, func(string) string { return "" }); err != nil {
			t.Fatal(err)
		}
		if m.LogLevel != "warn" {
			t.Errorf("got level %q, want warn", m.LogLevel)
		}
		if err := m.ParseFlags([]string{"--log-level", "loud"}, func(string) string { return "" }); !errors.Is(err, cli.ErrUsage) {
			t.Errorf("got %v, want a usage error", err)
		}
		var buf bytes.Buffer
		l := newLogger("json", zapcore.WarnLevel, &buf)
		l.Info("quiet")
		l.Warn("loud")
		if strings.Contains(buf.String(), "quiet") || !strings.Contains(buf.String(), "loud") {
			t.Errorf("got %q, want only the warning", buf.String())
		}
	})
	t.Run("DriverLogsGoThroughZap", func(t *testing.T) {
		var buf bytes.Buffer
		l := newLogger("json", zapcore.InfoLevel, &buf)
		redisLogger{l: l}.Printf(t.Context(), "redis: pool: %s", "dial failed")
		mysqlLogger{l: l}.Print("packets.go:58 ", "unexpected EOF")
		if !strings.Contains(buf.String(), `"msg":"redis: pool: dial failed"`) || !strings.Contains(buf.String(), "unexpected EOF") {
			t.Errorf("got %q, want both driver messages as JSON lines", buf.String())
		}
	})
}

// TestControlActionLevels: what takes a pod off its course is a warning.
func TestControlActionLevels(t *testing.T) {
	for _, tt := range []struct {
		action, actor string
		want          zapcore.Level
	}{
		{"killswitch_engage", "bob", zapcore.WarnLevel},
		{"automatic_abort", "auto", zapcore.WarnLevel},
		{"plan_abort", "plan", zapcore.WarnLevel},
		{"plan_abort", "bob", zapcore.InfoLevel},
		{"killswitch_disengage", "bob", zapcore.InfoLevel},
		{"set_mode", "bob", zapcore.InfoLevel},
	} {
		core, logs := observer.New(zapcore.DebugLevel)
		logControlAction(zap.New(core))(tandem.AuditLogEntry{Action: tt.action, Actor: tt.actor})
		if got := logs.All()[0].Level; got != tt.want {
			t.Errorf("%s by %s: got %s, want %s", tt.action, tt.actor, got, tt.want)
		}
	}
}
