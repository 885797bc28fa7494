package logging

import (
	"fmt"

	"go.uber.org/zap/zapcore"
)

// Level is the least severe line a logger writes: a flag's value
// (--log-level), parsed and named as the flag shows it.
type Level zapcore.Level

// The levels a user may choose. logr's V(1) lines are debug.
const (
	Debug = Level(zapcore.DebugLevel)
	Info  = Level(zapcore.InfoLevel)
	Error = Level(zapcore.ErrorLevel)
)

// LevelHelp is the help of a --log-level flag.
const LevelHelp = "Least severe log line written: debug (adds the detail of retries and races that resolve themselves), info (the default: starts, stops, changes, and each review's audit line), or error (only failures; no audit lines)."

// String is the level's name, as --log-level takes it.
func (l Level) String() string { return zapcore.Level(l).String() }

// Set parses a --log-level value, refusing what is not one of the three.
func (l *Level) Set(s string) error {
	switch s {
	case "debug":
		*l = Debug
	case "info":
		*l = Info
	case "error":
		*l = Error
	default:
		return fmt.Errorf("%q is not a log level; use debug, info or error", s)
	}
	return nil
}

// Type is what the flag's help shows as its value.
func (l *Level) Type() string { return "level" }
