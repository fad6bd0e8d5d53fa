package swutest

import (
	"os"
	"testing"
)

const (
	swupdatePath = "/usr/bin/swupdate"
	opensslPath  = "/usr/bin/openssl"

	// requireEnv, set to 1 (as CI sets it), turns a missing tool into a failure.
	requireEnv = "TASKD_REQUIRE_SWUPDATE"
)

// Require skips t when /usr/bin/swupdate or /usr/bin/openssl is missing, saying which,
// unless TASKD_REQUIRE_SWUPDATE=1 is set: then it fails t, so that a CI machine that
// lost the package cannot pass by skipping. NewSigner and Start call it; a test that
// sets up other fixtures first can call it earlier.
func Require(t testing.TB) {
	t.Helper()
	require(t, os.Getenv, swupdatePath, opensslPath)
}

func require(t testing.TB, getenv func(string) string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			if getenv(requireEnv) == "1" {
				t.Fatalf("swutest: %s is required (%s=1) but missing: %v", p, requireEnv, err)
				return
			}
			t.Skipf("swutest: %s missing (install Debian's swupdate and openssl packages): %v", p, err)
			return
		}
	}
}
