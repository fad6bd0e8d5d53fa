package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Output: -o table writes aligned columns (a header, then one row a record) or, for
// one record, "key: value" lines; -o json writes the client's records as JSON, one
// array for a list, one object for a record, so a script decodes them into the
// client package's types.

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printList writes records as -o asks: under header, a row of cells each (table),
// or a JSON array.
func printList[T any](e *env, records []T, header []string, row func(T) []string) error {
	if e.output == "json" {
		if records == nil {
			records = []T{} // [] rather than null: a script ranges over it
		}
		return printJSON(e.stdout, records)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range records {
		fmt.Fprintln(tw, strings.Join(cells(row(r)), "\t"))
	}
	return tw.Flush()
}

// cells makes each cell one word-safe column: "-" for an empty one, tabs and line
// breaks as spaces.
func cells(row []string) []string {
	for i, c := range row {
		if c == "" {
			c = "-"
		}
		row[i] = strings.Map(func(r rune) rune {
			if r == '\t' || r == '\n' || r == '\r' {
				return ' '
			}
			return r
		}, c)
	}
	return row
}

// printFields writes one record as "key: value" lines, aligned: the keys of its JSON
// form, those in first in that order and the others sorted; strings unquoted, other
// values as compact JSON, absent, null and empty lists left out.
func printFields(w io.Writer, record any, first ...string) error {
	b, err := json.Marshal(record)
	if err != nil {
		return err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range fields {
			if !slices.Contains(first, k) && !yield(k) {
				return
			}
		}
	})
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	for _, k := range slices.Concat(first, keys) {
		v, ok := fields[k]
		if !ok || string(v) == "null" || string(v) == "[]" {
			continue
		}
		fmt.Fprintf(tw, "%s:\t%s\n", k, jsonText(v))
	}
	return tw.Flush()
}

// jsonText is a JSON value as a table shows it: a string unquoted, anything else
// compact.
func jsonText(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s
	}
	var buf bytes.Buffer
	if json.Compact(&buf, v) != nil {
		return string(v)
	}
	return buf.String()
}

// clip is s cut to n characters, "..." marking the cut.
func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-3]) + "..."
	}
	return s
}

// when is a time as a table shows it: RFC 3339 in UTC to the second, "" for none.
func when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// collect gathers up to limit records from seq (0: all of them) and says whether
// it left some out.
func collect[T any](seq iter.Seq2[T, error], limit int) (out []T, more bool, err error) {
	for v, err := range seq {
		if err != nil {
			return out, false, err
		}
		if limit > 0 && len(out) == limit {
			return out, true, nil
		}
		out = append(out, v)
	}
	return out, false, nil
}

// noteMore tells the user on stderr that a list stopped at -limit.
func noteMore(e *env, more bool, limit int) {
	if more {
		fmt.Fprintf(e.stderr, "taskctl: the first %d shown; -limit 0 lists all\n", limit)
	}
}

// pageSize is the page size to ask for when a list is read up to limit records
// (one more, to know whether there are more).
func pageSize(limit int) int {
	if limit <= 0 {
		return 0
	}
	return min(limit+1, 1000)
}
