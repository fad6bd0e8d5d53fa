package app

import (
	"io"
	"slices"
	"strings"
	"testing"
)

// TestEnvNamesAreWhatLoadConfigReads: EnvNames (and so docs/CONFIG.md) lists exactly the
// variables LoadConfig asks the environment for.
func TestEnvNamesAreWhatLoadConfigReads(t *testing.T) {
	t.Parallel()
	var read []string
	getenv := func(k string) string {
		if !slices.Contains(read, k) {
			read = append(read, k)
		}
		return ""
	}
	if _, err := LoadConfig(nil, getenv, io.Discard); err != nil {
		t.Fatalf("LoadConfig with defaults: %v", err)
	}
	if !slices.Equal(read, EnvNames()) {
		t.Errorf("LoadConfig reads %v\nEnvNames says %v", read, EnvNames())
	}
}

func TestConfigReferenceHasEverySetting(t *testing.T) {
	t.Parallel()
	ref := ConfigReference()
	rows := strings.Split(strings.TrimSuffix(ref, "\n"), "\n")
	if got, want := len(rows), len(settings)+2; got != want {
		t.Fatalf("reference has %d lines, want %d (header, rule, one per setting):\n%s", got, want, ref)
	}
	for i, s := range settings {
		row := rows[i+2]
		for _, want := range []string{"`" + s.env + "`", "`-" + s.flag + "`", markdownDefault(s.def)} {
			if !strings.Contains(row, want) {
				t.Errorf("row %q lacks %s", row, want)
			}
		}
		if strings.Count(row, "|") != 5 {
			t.Errorf("row %q does not have four cells", row)
		}
	}
}
