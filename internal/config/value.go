package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Value is a setting's typed destination: it parses the text of a default, an
// environment variable or a flag into the variable it points to, and checks what the
// variable holds. Build one with String, List, Int, Int64, Uint64, Float, Bool,
// Duration or Func.
type Value interface {
	// Set parses v and stores it; an error says why v does not parse, not which
	// setting it is (Load says that).
	Set(v string) error
	// String is the value the variable holds, as text.
	String() string
	check() error
}

// Check is a condition on a setting's value: nil when the value passes, else why not
// (e.g. "must be positive, got 0s"); Validate names the setting. Positive,
// NotNegative, AtLeast, AtMost, Between, OneOf and Required build the common ones; any
// func(T) error will do.
type Check[T any] func(T) error

// variable is a Value of type T.
type variable[T any] struct {
	p      *T
	parse  func(string) (T, error)
	format func(T) string
	checks []Check[T]
}

func (v *variable[T]) Set(s string) error {
	x, err := v.parse(s)
	if err != nil {
		return err
	}
	*v.p = x
	return nil
}

func (v *variable[T]) String() string { return v.format(*v.p) }

func (v *variable[T]) check() error {
	for _, c := range v.checks {
		if err := c(*v.p); err != nil {
			return err
		}
	}
	return nil
}

func newVariable[T any](p *T, parse func(string) (T, error), format func(T) string, checks []Check[T]) Value {
	return &variable[T]{p: p, parse: parse, format: format, checks: checks}
}

// isBool says whether v is a Bool, whose flag may be given without a value (-json).
func isBool(v Value) bool {
	_, ok := v.(*variable[bool])
	return ok
}

// String is a text setting (of any string type, e.g. an enumeration).
func String[T ~string](p *T, checks ...Check[T]) Value {
	return newVariable(p, func(s string) (T, error) { return T(s), nil },
		func(v T) string { return string(v) }, checks)
}

// List is a comma-separated setting; blanks around items and empty items are dropped,
// so "" is the empty list.
func List(p *[]string, checks ...Check[[]string]) Value {
	return newVariable(p, func(s string) ([]string, error) { return SplitList(s), nil },
		func(v []string) string { return strings.Join(v, ",") }, checks)
}

// SplitList splits a comma-separated list as List does.
func SplitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// parsed is a Value whose text parse reads; a text it refuses is "not <what>".
func parsed[T any](p *T, parse func(string) (T, error), what string, format func(T) string, checks []Check[T]) Value {
	return newVariable(p, func(s string) (T, error) {
		v, err := parse(s)
		if err != nil {
			return v, fmt.Errorf("not %s: %q", what, s)
		}
		return v, nil
	}, format, checks)
}

// Int is a whole-number setting.
func Int(p *int, checks ...Check[int]) Value {
	return parsed(p, strconv.Atoi, "a whole number", strconv.Itoa, checks)
}

// Int64 is a whole-number setting held in an int64.
func Int64(p *int64, checks ...Check[int64]) Value {
	return parsed(p, func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }, "a whole number",
		func(n int64) string { return strconv.FormatInt(n, 10) }, checks)
}

// Uint64 is a setting of a whole number from 0 up.
func Uint64(p *uint64, checks ...Check[uint64]) Value {
	return parsed(p, func(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }, "a whole number from 0 up",
		func(n uint64) string { return strconv.FormatUint(n, 10) }, checks)
}

// Float is a number setting (10, 0.05, 1e3).
func Float(p *float64, checks ...Check[float64]) Value {
	return parsed(p, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }, "a number",
		func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }, checks)
}

// Bool is a true/false setting (also 1/0, t/f); its flag may be given alone (-json)
// or with a value (-check=false).
func Bool(p *bool, checks ...Check[bool]) Value {
	return parsed(p, strconv.ParseBool, "true or false", strconv.FormatBool, checks)
}

// Duration is a Go duration setting (500ms, 30s, 1h).
func Duration(p *time.Duration, checks ...Check[time.Duration]) Value {
	return parsed(p, time.ParseDuration, "a duration like 500ms, 30s or 1h", FormatDuration, checks)
}

// FormatDuration writes d as time.Duration.String does, without its trailing zero
// units: 1h, 5m, 1m30s, 500ms.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Func is a setting whose text set parses and applies itself (e.g. a preset that sets
// several fields); get says what it holds. It has no checks: set refuses what it
// cannot take.
func Func(set func(string) error, get func() string) Value {
	return funcValue{set, get}
}

type funcValue struct {
	set func(string) error
	get func() string
}

func (f funcValue) Set(v string) error { return f.set(v) }
func (f funcValue) String() string     { return f.get() }
func (f funcValue) check() error       { return nil }
