// Package logging makes the process's loggers: JSON lines through zap
// (the decision log line writes its fields straight into zap's encoder), and the
// standard library's log output (net/http's server errors) routed into them,
// bounded.
package logging

import (
	"io"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// New is the JSON logger every part of the process logs through, at Info.
func New(w io.Writer) logr.Logger { return NewAt(w, Info) }

// NewAt is New writing only lines at least as severe as level.
func NewAt(w io.Writer, level Level) logr.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = "ts"
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(w), zapcore.Level(level))
	return zapr.NewLogger(zap.New(core))
}
