package clientkey_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/clientkey"
	"github.com/taskpull/taskd/internal/clock"
	"github.com/taskpull/taskd/internal/testenv"
	"github.com/taskpull/taskd/queue"
)

// nodes returns n services over one database and one Redis prefix (n nodes of one
// deployment), on one fake clock.
func nodes(t *testing.T, n int, cfg clientkey.Config) ([]*clientkey.Service, *clock.Fake) {
	t.Helper()
	st := testenv.Store(t)
	rdb, prefix := testenv.Redis(t)
	clk := clock.NewFake(time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var out []*clientkey.Service
	for range n {
		cache := queue.NewCache(rdb, st, clk, queue.Config{Prefix: prefix})
		out = append(out, clientkey.New(st, cache, clk, log, cfg))
	}
	return out, clk
}

// Enrolled and admin-issued keys have caps of their own: enrolling again and again
// revokes only enrolled keys, never a key an admin issued; an admin issuing past the
// admin cap revokes only the oldest admin-issued key.
func TestEnrollNeverRevokesAdminKeys(t *testing.T) {
	t.Parallel()
	svcs, _ := nodes(t, 1, clientkey.Config{EnrollSecret: "s3cret", AdminKeysPerUID: 2, EnrolledKeysPerUID: 2})
	svc := svcs[0]
	ctx := context.Background()
	admin1, err := svc.Issue(ctx, "admin", "42")
	if err != nil {
		t.Fatal(err)
	}
	var enrolled []string
	for range 5 {
		k, err := svc.Enroll(ctx, "42", "s3cret")
		if err != nil {
			t.Fatal(err)
		}
		enrolled = append(enrolled, k)
	}
	works := func(what, key string, want bool) {
		t.Helper()
		_, err := svc.Verify(ctx, key)
		if got := err == nil; got != want {
			t.Errorf("%s: works = %v (%v), want %v", what, got, err, want)
		}
	}
	works("the admin-issued key after five enrolls", admin1, true)
	for i, k := range enrolled {
		works("enrolled key "+string(rune('1'+i)), k, i >= 3)
	}
	admin2, _ := svc.Issue(ctx, "admin", "42")
	admin3, _ := svc.Issue(ctx, "admin", "42") // the third of at most two: admin1 goes
	works("the oldest admin-issued key past the admin cap", admin1, false)
	works("admin key 2", admin2, true)
	works("admin key 3", admin3, true)
	works("enrolled key 4 after admin issues", enrolled[3], true)
	works("enrolled key 5 after admin issues", enrolled[4], true)
}

// With EnrollUIDs set, only a uid it matches whole may enroll: another is refused
// with permission_denied, after the secret is checked (a wrong secret is a 401
// whatever the uid, so the pattern tells a guesser nothing).
func TestEnrollUIDPattern(t *testing.T) {
	t.Parallel()
	svcs, _ := nodes(t, 1, clientkey.Config{EnrollSecret: "s3cret", EnrollUIDs: regexp.MustCompile(`host-[0-9]+`)})
	svc := svcs[0]
	ctx := context.Background()
	if _, err := svc.Enroll(ctx, "host-7", "s3cret"); err != nil {
		t.Fatalf("a uid the pattern matches: %v", err)
	}
	for _, uid := range []string{"42", "xhost-7", "host-7x", "host-"} {
		if _, err := svc.Enroll(ctx, uid, "s3cret"); taskd.ErrorCode(err) != taskd.CodePermission {
			t.Errorf("enroll of %q, outside the pattern: %v, want permission_denied", uid, err)
		}
	}
	if _, err := svc.Enroll(ctx, "42", "wrong"); taskd.ErrorCode(err) != taskd.CodeUnauthenticated {
		t.Errorf("a wrong secret with a uid outside the pattern: %v, want unauthenticated", err)
	}
	// An admin issues keys to any uid.
	if _, err := svc.Issue(ctx, "admin", "42"); err != nil {
		t.Errorf("admin issue to a uid outside the enrollment pattern: %v", err)
	}
}

// EnrollRate bounds enrollments over every node (the limiter lives in Redis): past
// the burst an enrollment is rate_limited with the wait until the next one is allowed;
// enrollments with a wrong secret do not spend the allowance.
func TestEnrollRate(t *testing.T) {
	t.Parallel()
	svcs, clk := nodes(t, 2, clientkey.Config{EnrollSecret: "s3cret", EnrollRate: 2, EnrollBurst: 3})
	ctx := context.Background()
	for i := range 10 {
		if _, err := svcs[i%2].Enroll(ctx, "spent", "wrong"); taskd.ErrorCode(err) != taskd.CodeUnauthenticated {
			t.Fatalf("wrong secret: %v", err)
		}
	}
	for i := range 3 { // the burst, over both nodes
		if _, err := svcs[i%2].Enroll(ctx, "u"+string(rune('a'+i)), "s3cret"); err != nil {
			t.Fatalf("enrollment %d of a burst of 3: %v", i+1, err)
		}
	}
	_, err := svcs[1].Enroll(ctx, "ud", "s3cret")
	var e *taskd.Error
	if !errors.As(err, &e) || e.Code != taskd.CodeRateLimited || e.RetryAfter != 500*time.Millisecond {
		t.Fatalf("the fourth enrollment at once, at 2 a second: %v, want rate_limited with a 500ms wait", err)
	}
	if _, err := svcs[0].Enroll(ctx, "ud", "s3cret"); taskd.ErrorCode(err) != taskd.CodeRateLimited {
		t.Fatalf("the other node, at once: %v, want rate_limited", err)
	}
	clk.Advance(500 * time.Millisecond)
	if _, err := svcs[0].Enroll(ctx, "ud", "s3cret"); err != nil {
		t.Fatalf("after the wait: %v", err)
	}
	// Admin issues are not enrollments.
	if _, err := svcs[0].Issue(ctx, "admin", "ue"); err != nil {
		t.Fatalf("admin issue while enrollment is limited: %v", err)
	}
}
