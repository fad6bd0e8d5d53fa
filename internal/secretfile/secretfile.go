// Package secretfile reads a secret (a token, an enrollment secret) from a file, as
// the command-line tools take them: never from a flag, which ps shows.
package secretfile

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// maxSize bounds what Read reads: a secret is short.
const maxSize = 4 << 10

// Read reads the secret in path: its content, less surrounding white space. A file
// that is empty, or over 4 KiB, is an error naming it.
func Read(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("%s: %w", path, err)
	case len(b) > maxSize:
		return "", fmt.Errorf("%s: over %d bytes: not a secret", path, maxSize)
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return secret, nil
}
