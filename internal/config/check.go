package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Number is what the numeric checks apply to; time.Duration is one.
type Number interface {
	~int | ~int64 | ~uint64 | ~float64
}

// show writes a value for a message: durations as FormatDuration does.
func show[T any](v T) string {
	if d, ok := any(v).(time.Duration); ok {
		return FormatDuration(d)
	}
	return fmt.Sprint(v)
}

// Positive refuses zero and below (and a float's NaN): for durations, sizes and counts
// where zero means nothing.
func Positive[T Number](v T) error {
	if !(v > 0) {
		return fmt.Errorf("must be positive, got %s", show(v))
	}
	return nil
}

// NotNegative refuses below zero: for durations and counts where zero means something
// ("do not wait", "no limit").
func NotNegative[T Number](v T) error {
	if !(v >= 0) {
		return fmt.Errorf("must not be negative, got %s", show(v))
	}
	return nil
}

// AtLeast refuses values below least.
func AtLeast[T Number](least T) Check[T] {
	return func(v T) error {
		if !(v >= least) {
			return fmt.Errorf("must be at least %s, got %s", show(least), show(v))
		}
		return nil
	}
}

// AtMost refuses values above most.
func AtMost[T Number](most T) Check[T] {
	return func(v T) error {
		if !(v <= most) {
			return fmt.Errorf("must be at most %s, got %s", show(most), show(v))
		}
		return nil
	}
}

// Between refuses values outside least..most (both allowed).
func Between[T Number](least, most T) Check[T] {
	return func(v T) error {
		if !(v >= least && v <= most) {
			return fmt.Errorf("must be %s..%s, got %s", show(least), show(most), show(v))
		}
		return nil
	}
}

// OneOf refuses a value that is not one of values.
func OneOf[T ~string](values ...T) Check[T] {
	return func(v T) error {
		for _, ok := range values {
			if v == ok {
				return nil
			}
		}
		names := make([]string, len(values))
		for i, ok := range values {
			names[i] = string(ok)
		}
		return fmt.Errorf("must be one of %s, got %s", strings.Join(names, ", "), strconv.Quote(string(v)))
	}
}

// Required refuses an empty string or list.
func Required[T ~string | ~[]string](v T) error {
	if len(v) == 0 {
		return fmt.Errorf("required")
	}
	return nil
}
