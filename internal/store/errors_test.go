package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/taskpull/taskd"
)

// Only a database that cannot be reached is a 503; a value the schema refuses is a 400
// naming the column, a duplicate a 409, anything else internal.
func TestMySQLErrorsAreClassified(t *testing.T) {
	cases := []struct {
		err   error
		code  taskd.Code
		field string
	}{
		{context.DeadlineExceeded, taskd.CodeUnavailable, ""},
		{driver.ErrBadConn, taskd.CodeUnavailable, ""},
		{mysql.ErrInvalidConn, taskd.CodeUnavailable, ""},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, taskd.CodeUnavailable, ""},
		{fmt.Errorf("begin: %w", syscall.ECONNRESET), taskd.CodeUnavailable, ""},
		{&mysql.MySQLError{Number: 1040, Message: "Too many connections"}, taskd.CodeUnavailable, ""},
		{&mysql.MySQLError{Number: 1053, Message: "Server shutdown in progress"}, taskd.CodeUnavailable, ""},
		{&mysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded"}, taskd.CodeUnavailable, ""},
		{&mysql.MySQLError{Number: 1290, Message: "read-only"}, taskd.CodeUnavailable, ""},
		{&mysql.MySQLError{Number: 1203, Message: "max_user_connections"}, taskd.CodeUnavailable, ""},
		{&mysql.MySQLError{Number: 1317, Message: "interrupted"}, taskd.CodeUnavailable, ""},
		{&mysql.MySQLError{Number: 4031, Message: "inactivity"}, taskd.CodeUnavailable, ""},
		{&mysql.MySQLError{Number: 1264, Message: "Out of range value for column 'dispatch_times' at row 1"}, taskd.CodeInvalid, "dispatch_times"},
		{&mysql.MySQLError{Number: 1406, Message: "Data too long for column 'name' at row 1"}, taskd.CodeInvalid, "name"},
		{&mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}, taskd.CodeConflict, ""},
		{&mysql.MySQLError{Number: 1064, Message: "You have an error in your SQL syntax near 'secret_table'"}, taskd.CodeInternal, ""},
		{&mysql.MySQLError{Number: 1146, Message: "Table 'taskd.x' doesn't exist"}, taskd.CodeInternal, ""},
		{errors.New("sql: Scan error on column index 2: converting NULL to int is unsupported"), taskd.CodeInternal, ""},
	}
	for _, c := range cases {
		err := mysqlErr("op", c.err)
		var te *taskd.Error
		if !errors.As(err, &te) || te.Code != c.code {
			t.Errorf("%v: got %v, want code %s", c.err, err, c.code)
			continue
		}
		if !errors.Is(err, c.err) {
			t.Errorf("%v: cause lost", c.err)
		}
		if c.field != "" && !strings.HasPrefix(te.Message, c.field+":") {
			t.Errorf("%v: message %q does not name %s", c.err, te.Message, c.field)
		}
		if c.code == taskd.CodeInternal && te.Message != "internal error" {
			t.Errorf("%v: internal message %q says too much", c.err, te.Message)
		}
	}
	if mysqlErr("op", nil) != nil {
		t.Error("nil is not nil")
	}
}
