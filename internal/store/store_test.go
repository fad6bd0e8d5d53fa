package store_test

import (
	"context"
	"testing"

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
	// eleven tables of ours plus golang-migrate's schema_migrations
	if n != 12 {
		t.Fatalf("tables after migrate: %d, want 12", n)
	}
}
