package store

import (
	"encoding/json"
	"strings"

	"github.com/taskpull/taskd"
)

// The task-type settings columns, in taskd.Settings' order: on a template its
// defaults, on a task its own values (NULL: not set).
var settingsNames = []string{"lease_seconds", "max_attempts", "retry_backoff_seconds", "retry_multiplier",
	"retry_max_seconds", "dispatch_rate_per_minute", "confirm_seconds"}

// settingsCols lists the settings columns of the table aliased alias.
func settingsCols(alias string) string {
	return alias + "." + strings.Join(settingsNames, ", "+alias+".")
}

// settingsSet is the SET list that writes every settings column.
func settingsSet() string { return strings.Join(settingsNames, " = ?, ") + " = ?" }

// settingsDest are the scan destinations of settingsCols.
func settingsDest(s *taskd.Settings) []any {
	return []any{&s.LeaseSeconds, &s.MaxAttempts, &s.RetryBackoffSeconds, &s.RetryMultiplier, &s.RetryMaxSeconds,
		&s.DispatchRatePerMinute, &s.ConfirmSeconds}
}

// settingsArgs are the values of settingsCols for s (nil: NULL).
func settingsArgs(s taskd.Settings) []any {
	return []any{s.LeaseSeconds, s.MaxAttempts, s.RetryBackoffSeconds, s.RetryMultiplier, s.RetryMaxSeconds,
		s.DispatchRatePerMinute, s.ConfirmSeconds}
}

// stagesArg is a template's stages as stored (NULL for none).
func stagesArg(stages []string) any {
	if len(stages) == 0 {
		return nil
	}
	b, _ := json.Marshal(stages)
	return string(b)
}

// parseStages reads a template's stored stages.
func parseStages(raw *string) ([]string, error) {
	stages := []string{}
	if raw == nil || *raw == "" {
		return stages, nil
	}
	return stages, json.Unmarshal([]byte(*raw), &stages)
}
