package server

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/tandemhq/tandem"
	"github.com/tandemhq/tandem/killswitch"
	"github.com/tandemhq/tandem/rollout"
)

// newLogger returns a logger writing JSON or console lines to w at level,
// with ISO 8601 times.
func newLogger(format string, level zapcore.Level, w io.Writer) *zap.Logger {
	cfg := zap.NewProductionEncoderConfig()
	cfg.EncodeTime = zapcore.ISO8601TimeEncoder
	enc := zapcore.NewJSONEncoder(cfg)
	if format == "console" {
		dev := zap.NewDevelopmentEncoderConfig()
		dev.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewConsoleEncoder(dev)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), level))
}

// parseLogLevel reads --log-level: debug, info, warn or error.
func parseLogLevel(s string) (zapcore.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return zapcore.DebugLevel, nil
	case "", "info":
		return zapcore.InfoLevel, nil
	case "warn", "warning":
		return zapcore.WarnLevel, nil
	case "error":
		return zapcore.ErrorLevel, nil
	}
	return zapcore.InfoLevel, fmt.Errorf("--log-level must be debug, info, warn or error, got %q", s)
}

// redisLogger sends go-redis's own messages (pool and reconnect notes)
// through zap instead of the standard logger.
type redisLogger struct{ l *zap.Logger }

func (r redisLogger) Printf(_ context.Context, format string, v ...any) {
	r.l.Warn(strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// mysqlLogger sends the MySQL driver's messages (broken connections and
// the like) through zap instead of the standard logger.
type mysqlLogger struct{ l *zap.Logger }

func (m mysqlLogger) Print(v ...any) {
	m.l.Warn(strings.TrimSpace(fmt.Sprint(v...)))
}

// routeDriverLogs makes the go-redis and MySQL drivers log through logger.
// Both drivers keep one logger per process: the last Main to run wins.
func routeDriverLogs(logger *zap.Logger) {
	redis.SetLogger(redisLogger{l: logger.With(zap.String("driver", "go-redis"))})
	_ = mysql.SetLogger(mysqlLogger{l: logger.With(zap.String("driver", "mysql"))})
}

// logControlAction writes one structured line per control action: mode
// change, kill switch, audit, resync, backfill, plan step, automatic abort.
// What takes a pod off its course is a warning: the kill switch engaged,
// the automatic abort, the plan aborting itself; the rest is info.
func logControlAction(logger *zap.Logger) func(tandem.AuditLogEntry) {
	return func(e tandem.AuditLogEntry) {
		level := zapcore.InfoLevel
		switch {
		case e.Action == killswitch.ActionEngage, e.Action == rollout.ActionAutomaticAbort,
			e.Action == rollout.ActionPlanAbort && e.Actor == rollout.ActorPlan:
			level = zapcore.WarnLevel
		}
		logger.Log(level, "control action",
			zap.String("action", e.Action),
			zap.String("actor", e.Actor),
			zap.String("reason", e.Reason),
			zap.String("pod", e.Pod),
			zap.String("before", e.Before),
			zap.String("after", e.After),
			zap.Time("at", e.At))
	}
}
