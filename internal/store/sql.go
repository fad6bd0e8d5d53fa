package store

import (
	"context"
	"database/sql"
	"strings"
)

// What the store's statements share: the interfaces a *sql.DB and a *sql.Tx both
// satisfy, and the builders of placeholder lists.

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(...any) error }

// rowQuerier is a *sql.DB or a *sql.Tx.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// nullInt is an optional integer column's value (NULL for 0).
func nullInt(n int) any {
	if n == 0 {
		return nil
	}
	return n
}

// marks is n comma-separated placeholders.
func marks(n int) string {
	return "?" + strings.Repeat(", ?", n-1)
}

// anys is vs as arguments.
func anys[T any](vs []T) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}

// tuples is n parenthesized groups of width placeholders: a multi-row VALUES list.
func tuples(n, width int) string {
	one := "(" + marks(width) + ")"
	return one + strings.Repeat(", "+one, n-1)
}

// anyOf matches rows whose cols equal any of n groups of arguments:
// "(a = ? AND b = ?) OR (a = ? AND b = ?)". Not a row IN: MariaDB reads a row IN of one
// element in a DELETE by scanning the table (locking what it reads), where this form
// is a range on the key in every statement.
func anyOf(n int, cols ...string) string {
	one := "(" + strings.Join(cols, " = ? AND ") + " = ?)"
	return one + strings.Repeat(" OR "+one, n-1)
}
