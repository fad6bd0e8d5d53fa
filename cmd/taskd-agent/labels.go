package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"strings"
)

// An agent's labels, as the server shows them: from -label (repeatable) or
// TASKD_LABELS ("k=v,k2=v2"), and from a label file (-label-file) the operator may
// edit and have read again with SIGHUP. The SDK checks keys and values (and refuses
// its own prefix, taskd.dev/); here only the syntax is checked, naming the source.

// labelFlag is -label: each use adds one; the first replaces TASKD_LABELS's.
type labelFlag struct {
	env   string   // TASKD_LABELS
	flags []string // -label's, in order
}

func (l *labelFlag) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.flags, ",")
}

func (l *labelFlag) Set(v string) error {
	if _, _, err := parseLabel(v); err != nil {
		return err
	}
	l.flags = append(l.flags, v)
	return nil
}

// parse is the labels given: -label's, or else TASKD_LABELS's.
func (l *labelFlag) parse() (map[string]string, error) {
	if len(l.flags) > 0 {
		return labelMap("-label", l.flags)
	}
	if strings.TrimSpace(l.env) == "" {
		return nil, nil
	}
	return labelMap("TASKD_LABELS", strings.Split(l.env, ","))
}

// parseLabel reads key=value (surrounding spaces dropped; the value may be empty).
func parseLabel(s string) (string, string, error) {
	k, v, ok := strings.Cut(s, "=")
	k, v = strings.TrimSpace(k), strings.TrimSpace(v)
	if !ok || k == "" {
		return "", "", fmt.Errorf("want key=value, got %q", s)
	}
	return k, v, nil
}

// labelMap reads pairs from source, refusing a key given twice.
func labelMap(source string, pairs []string) (map[string]string, error) {
	m := map[string]string{}
	for _, p := range pairs {
		k, v, err := parseLabel(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("%s: label %q given twice", source, k)
		}
		m[k] = v
	}
	return m, nil
}

// maxLabelFile bounds what is read of a label file: 32 labels of 63 + 255 bytes fit.
const maxLabelFile = 64 << 10

// readLabelFile reads path: key=value a line; blank lines and lines starting with #
// are skipped.
func readLabelFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxLabelFile+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: %w", path, err)
	case len(b) > maxLabelFile:
		return nil, fmt.Errorf("%s: over %d bytes", path, maxLabelFile)
	}
	var pairs []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, maxLabelFile)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if _, _, err := parseLabel(line); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		pairs = append(pairs, line)
	}
	return labelMap(path, pairs)
}

// allLabels is the labels of c: -label's (or TASKD_LABELS's) and the label file's; a
// key in both is refused.
func allLabels(c runConfig) (map[string]string, error) {
	labels, err := c.labels.parse()
	if err != nil || c.labelFile == "" {
		return labels, err
	}
	file, err := readLabelFile(c.labelFile)
	if err != nil {
		return nil, fmt.Errorf("-label-file: %w", err)
	}
	for k := range file {
		if _, ok := labels[k]; ok {
			return nil, fmt.Errorf("-label-file: label %q is given by -label (or TASKD_LABELS) too", k)
		}
	}
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, file)
	return labels, nil
}
