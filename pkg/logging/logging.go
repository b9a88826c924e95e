// Package logging builds the structured zap logger both binaries log with:
// JSON lines on one writer, ISO 8601 times, the level --log-level names,
// and a "component" field on every subsystem's logger.
package logging

import (
	"flag"
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// LevelFlag is the flag naming the level.
const LevelFlag = "log-level"

// ComponentKey is the field naming the part of a binary that logs.
const ComponentKey = "component"

// RegisterLevelFlag binds --log-level to level (its current value is the
// default).
func RegisterLevelFlag(fs *flag.FlagSet, level *string) {
	fs.StringVar(level, LevelFlag, *level, "log level: debug, info, warn or error")
}

// ValidateLevel refuses a level New cannot build, naming the flag.
func ValidateLevel(level string) error {
	if _, err := zapcore.ParseLevel(level); err != nil {
		return fmt.Errorf("--%s %q: want debug, info, warn or error", LevelFlag, level)
	}
	return nil
}

// New returns a logger writing JSON lines at level and above to w.
func New(level string, w io.Writer) (*zap.Logger, error) {
	if err := ValidateLevel(level); err != nil {
		return nil, err
	}
	lvl, _ := zapcore.ParseLevel(level)
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	return zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), lvl)), nil
}

// Component is log with the component field set to name.
func Component(log *zap.Logger, name string) *zap.Logger {
	return log.With(zap.String(ComponentKey, name))
}
