package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/taskpull/taskd/internal/store"
	"github.com/taskpull/taskd/internal/testenv"
)

func TestMigrationsApply(t *testing.T) {
	t.Parallel()
	s := testenv.Store(t)
	var n int
	if err := s.DB().QueryRowContext(context.Background(),
		"SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	// fifteen tables of ours plus golang-migrate's schema_migrations
	if n != 16 {
		t.Fatalf("tables after migrate: %d, want 16", n)
	}
}

// Arguments are interpolated by the driver; a charset where that is unsafe is refused
// with a message naming it, before any connection.
func TestOpenRefusesUnsafeCharset(t *testing.T) {
	t.Parallel()
	_, err := store.Open(context.Background(), "root@tcp(127.0.0.1:3306)/x?charset=gbk", store.OpenOptions{})
	if err == nil || !strings.Contains(err.Error(), "charset gbk") {
		t.Fatalf("open with charset=gbk: %v", err)
	}
}
