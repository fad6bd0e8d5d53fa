package app

import (
	"fmt"
	"strings"
)

// ConfigReference renders the settings table as a Markdown table (env, flag, default,
// meaning), the text docs/CONFIG.md carries for dispatchd. It is built from the same
// table LoadConfig reads, so the reference cannot drift from the binary.
func ConfigReference() string {
	var b strings.Builder
	b.WriteString("| env | flag | default | meaning |\n|---|---|---|---|\n")
	for _, s := range settings {
		fmt.Fprintf(&b, "| `%s` | `-%s` | %s | %s |\n", s.env, s.flag, markdownDefault(s.def), markdownCell(s.usage))
	}
	return b.String()
}

// EnvNames lists the environment variables LoadConfig reads, in table order. The outbox
// relay inside dispatchd reads a few more (logsink.RelayEnvNames).
func EnvNames() []string {
	names := make([]string, len(settings))
	for i, s := range settings {
		names[i] = s.env
	}
	return names
}

// markdownDefault shows a default value in a Markdown table cell: as code, or "(empty)".
func markdownDefault(v string) string {
	if v == "" {
		return "(empty)"
	}
	return "`" + v + "`"
}

// markdownCell escapes the characters that would break a Markdown table cell.
func markdownCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}
