// Package archtest holds no code: its test enforces the import rules of the layers
// (README, "Architecture") from `go list`, so a change that breaks them fails the build.
package archtest
