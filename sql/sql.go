// Package sql embeds the numbered schema migrations so that the binary carries its own
// schema. internal/store applies them with golang-migrate at start.
package sql

import "embed"

// Migrations holds migrations/NNNN_name.{up,down}.sql.
//
//go:embed migrations/*.sql
var Migrations embed.FS
