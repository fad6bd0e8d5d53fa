// Package config is the one configuration mechanism of the project's binaries
// (dispatchd, logsink, loadtest). A binary describes its settings as a Table: one row a
// setting, with its environment variable, its flag (or none), its default, its meaning,
// a typed destination and the checks its value must pass. From that table alone come
// loading (defaults, then environment, then flags: flags win), the errors of values
// that do not parse or do not pass (each naming the setting and where its value came
// from), the -h text, the Markdown rows of docs/CONFIG.md, the list of environment
// variables read, and where each value came from (Sources).
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Setting is one row of a Table.
type Setting struct {
	// Env is the environment variable; "" for a setting that only has a flag.
	Env string
	// Flag is the flag's name without the dash; "" for a setting that only has an
	// environment variable.
	Flag string
	// Default is the value before the environment and flags, written as it would be
	// in the environment ("" for an empty string or list).
	Default string
	// DefaultNote, when set, says where the value comes from instead: the row takes no
	// default of its own (Default is not applied), and -h and the reference show the
	// note, e.g. "the preset's".
	DefaultNote string
	// Usage is the meaning, one line.
	Usage string
	// Value is the typed destination and its checks: String, List, Int, Duration, ...
	Value Value
	// Skip, when set and true at validation, passes over the row's checks: the setting
	// plays no part then (e.g. a load test's size in a check-only run).
	Skip func() bool
}

// Name is how messages and Sources name the setting: its environment variable, else
// its flag with the dash.
func (s Setting) Name() string {
	if s.Env != "" {
		return s.Env
	}
	return "-" + s.Flag
}

// Table is a binary's settings, in the order -h and the reference list them. Flags are
// applied in this order too, whatever their order on the command line, so a row may
// set what later rows refine (a preset, then sizes).
type Table []Setting

// Sources says where each setting took its value, by Setting.Name: "flag -<name>" or
// the environment variable's name; a setting absent took its default. The zero value
// (nil) says "default" for every setting.
type Sources map[string]string

// Of says where the setting named name got its value: "flag -<name>", the environment
// variable's name, or "default".
func (src Sources) Of(name string) string {
	if s, ok := src[name]; ok {
		return s
	}
	return "default"
}

// Label is how an error names the setting: by name, and by its flag too when the
// value came from it ("DISPATCH_MAX_WAIT (flag -max-wait)").
func (src Sources) Label(name string) string {
	s := src.Of(name)
	if !strings.HasPrefix(s, "flag ") || strings.TrimPrefix(s, "flag ") == name {
		return name
	}
	return name + " (" + s + ")"
}

// Errorf is an error about the setting named name: its Label, a colon, the message.
func (src Sources) Errorf(name, format string, args ...any) error {
	return fmt.Errorf("%s: "+format, append([]any{src.Label(name)}, args...)...)
}

// SetDefaults sets every row's destination to its default. A default that does not
// parse is the table's mistake, reported with the setting's name.
func (t Table) SetDefaults() error {
	var errs []error
	for _, s := range t {
		if s.DefaultNote != "" {
			continue
		}
		if err := s.Value.Set(s.Default); err != nil {
			errs = append(errs, fmt.Errorf("default of %s: %w", s.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// Load sets every destination from the defaults, then from the environment (read with
// getenv; an empty value is unset), then from the flags in args, and says where each
// value came from. Values that do not parse are errors naming the setting and the
// source, all of them joined. -h or --help returns flag.ErrHelp (see WriteUsage) and
// sets nothing; so does a flag that is not defined or lacks its value, which is an
// error naming it. Load does not validate: see Validate.
func (t Table) Load(args []string, getenv func(string) string) (Sources, error) {
	given, err := t.parseArgs(args)
	if err != nil {
		return nil, err
	}
	if err := t.SetDefaults(); err != nil {
		return nil, err
	}
	src := Sources{}
	var errs []error
	for _, s := range t {
		if s.Env == "" {
			continue
		}
		if v := getenv(s.Env); v != "" {
			if err := s.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", s.Env, err))
				continue
			}
			src[s.Name()] = s.Env
		}
	}
	for _, s := range t {
		v, ok := given[s.Flag]
		if s.Flag == "" || !ok {
			continue
		}
		src[s.Name()] = "flag -" + s.Flag
		if err := s.Value.Set(v); err != nil {
			errs = append(errs, src.Errorf(s.Name(), "%w", err))
		}
	}
	return src, errors.Join(errs...)
}

// parseArgs reads the flags in args without applying them: the value given to each
// flag (the last, when one is repeated).
func (t Table) parseArgs(args []string) (map[string]string, error) {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the caller reports errors and writes -h
	fs.Usage = func() {}
	given := map[string]string{}
	for _, s := range t {
		if s.Flag != "" {
			fs.Var(recorder{name: s.Flag, given: given, isBool: isBool(s.Value)}, s.Flag, s.Usage)
		}
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	return given, nil
}

// recorder is the flag.Value of one flag during parseArgs: it keeps the text given.
type recorder struct {
	name   string
	given  map[string]string
	isBool bool
}

func (r recorder) String() string   { return "" }
func (r recorder) IsBoolFlag() bool { return r.isBool }
func (r recorder) Set(v string) error {
	r.given[r.name] = v
	return nil
}

// Validate runs every row's checks (but those Skip passes over) and reports each
// failure naming the setting, where its value came from (src, as Load returned it; nil
// when unknown) and the value, all of them joined.
func (t Table) Validate(src Sources) error {
	var errs []error
	for _, s := range t {
		if s.Skip != nil && s.Skip() {
			continue
		}
		if err := s.Value.check(); err != nil {
			errs = append(errs, src.Errorf(s.Name(), "%w", err))
		}
	}
	return errors.Join(errs...)
}

// EnvNames lists the environment variables Load reads, in table order.
func (t Table) EnvNames() []string {
	var names []string
	for _, s := range t {
		if s.Env != "" {
			names = append(names, s.Env)
		}
	}
	return names
}

// Without is the table without the rows whose environment variable is among env.
func (t Table) Without(env []string) Table {
	var out Table
	for _, s := range t {
		if !slices.Contains(env, s.Env) {
			out = append(out, s)
		}
	}
	return out
}

// WriteUsage writes the -h text: intro, then every row with a flag (its environment
// variable, its flag, its default and its meaning), then the rows without one under
// "Environment only (no flag):".
func (t Table) WriteUsage(w io.Writer, intro string) {
	fmt.Fprint(w, intro)
	var envOnly Table
	for _, s := range t {
		if s.Flag == "" {
			envOnly = append(envOnly, s)
			continue
		}
		head := "-" + s.Flag
		if s.Env != "" {
			head = s.Env + ", " + head
		}
		writeRow(w, head, s)
	}
	if len(envOnly) > 0 {
		fmt.Fprint(w, "\nEnvironment only (no flag):\n\n")
		for _, s := range envOnly {
			writeRow(w, s.Env, s)
		}
	}
}

func writeRow(w io.Writer, head string, s Setting) {
	def := fmt.Sprintf("default %q", s.Default)
	if s.DefaultNote != "" {
		def = "default: " + s.DefaultNote
	}
	fmt.Fprintf(w, "  %s (%s)\n      %s\n", head, def, s.Usage)
}

// Reference renders the table as Markdown (env, flag, default, meaning), the rows
// docs/CONFIG.md carries: "—" where a setting has no environment variable or no flag.
func (t Table) Reference() string {
	cell := strings.NewReplacer("|", `\|`, "\n", " ").Replace
	code := func(prefix, v string) string {
		if v == "" {
			return "—"
		}
		return "`" + prefix + v + "`"
	}
	var b strings.Builder
	b.WriteString("| env | flag | default | meaning |\n|---|---|---|---|\n")
	for _, s := range t {
		def := "(empty)"
		switch {
		case s.DefaultNote != "":
			def = cell(s.DefaultNote)
		case s.Default != "":
			def = "`" + s.Default + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", code("", s.Env), code("-", s.Flag), def, cell(s.Usage))
	}
	return b.String()
}
