package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"syscall"

	"github.com/go-sql-driver/mysql"

	"github.com/taskpull/taskd"
)

// mysqlErr gives a database error its kind, with op as context; nil stays nil. Only a
// database that cannot be reached or cannot serve right now is unavailable (503, the
// client may retry); a value the schema refuses is invalid naming the column, a key
// collision a conflict; anything else is internal: a bug to log, not a reason to make
// clients retry.
func mysqlErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var te *taskd.Error
	if errors.As(err, &te) {
		return err
	}
	wrapped := fmt.Errorf("%s: %w", op, err)
	if unreachable(err) {
		return taskd.Unavailable("mysql", wrapped)
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1062: // duplicate key
			return &taskd.Error{Code: taskd.CodeConflict, Message: op + ": a concurrent change got there first; try again", Err: wrapped}
		case 1451, 1452: // foreign key
			return &taskd.Error{Code: taskd.CodeConflict, Message: op + ": refers to or is referred to by another record", Err: wrapped}
		case 1264, 1406, 1366, 1292, 1048: // out of range, too long, bad value, bad date, null
			field := "request"
			if m := columnName.FindStringSubmatch(me.Message); m != nil {
				field = m[1]
			}
			return &taskd.Error{Code: taskd.CodeInvalid, Message: field + ": value out of the range this server stores", Err: wrapped}
		}
	}
	return &taskd.Error{Code: taskd.CodeInternal, Message: "internal error", Err: wrapped}
}

// columnName finds the column a MySQL data error names ("... for column 'x' at row 1").
var columnName = regexp.MustCompile(`column '([^']+)'`)

// unreachable reports an error that says the database could not be asked or did not
// answer: refused or broken connections, timeouts (the request's own bound included),
// a server shutting down, out of connections, or too busy to take a lock in time.
func unreachable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, errClosed) ||
		errors.Is(err, errConflict) || // a write conflict still, after retries
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn) ||
		errors.Is(err, sql.ErrTxDone) || errors.Is(err, sql.ErrConnDone) || // ended by a deadline mid-transaction
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return true
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1040, // too many connections
			1053,       // server shutdown in progress
			1205,       // lock wait timeout
			1203,       // the user's connection limit (max_user_connections)
			1213,       // deadlock (still, after retries)
			1290,       // read-only (a replica, or --read-only during a failover)
			1317,       // query interrupted (KILL QUERY, a server shutting down)
			4031,       // disconnected by the server for inactivity (MySQL 8.0.24 and later)
			1927,       // connection killed
			2002, 2003, // cannot connect
			2006, 2013, // server gone away, lost connection
			3024, 1969: // statement timeout (MySQL, MariaDB)
			return true
		}
	}
	return false
}
