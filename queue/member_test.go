package queue

import (
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/taskpull/taskd"
	"github.com/taskpull/taskd/schedule"
)

var t0 = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

func once(id int64, due time.Time, prio int) schedule.Entry {
	return schedule.Entry{Task: taskd.TaskKey{Kind: taskd.KindOnce, ID: id}, DueAt: due, Priority: prio}
}

// The Redis sorted set orders by (score, member bytes); that must be the heap's order.
func TestMemberOrderMatchesLess(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var es []schedule.Entry
	for i := 0; i < 2000; i++ {
		e := schedule.Entry{
			Task:     taskd.TaskKey{Kind: taskd.Kind(1 + rng.IntN(2)), ID: 1 + rng.Int64N(5000)},
			DueAt:    t0.Add(time.Duration(rng.IntN(4)) * time.Minute),
			Priority: 1 + rng.IntN(9),
		}
		if e.Task.Kind == taskd.KindRotate {
			e.Space = time.Duration(1+rng.IntN(100)) * time.Minute
		}
		if rng.IntN(4) == 0 {
			// A waiting dispatch, or a confirm entry: no task, a log id.
			e = schedule.Entry{LogID: "L" + strconv.Itoa(1000+rng.IntN(9000)), Confirm: rng.IntN(2) == 0,
				DueAt: e.DueAt, Priority: e.Priority}
		}
		es = append(es, e)
	}
	byLess := append([]schedule.Entry(nil), es...)
	sort.SliceStable(byLess, func(i, j int) bool { return schedule.Less(byLess[i], byLess[j]) })
	byRedis := append([]schedule.Entry(nil), es...)
	sort.SliceStable(byRedis, func(i, j int) bool {
		a, b := byRedis[i], byRedis[j]
		if !a.DueAt.Equal(b.DueAt) {
			return a.DueAt.Before(b.DueAt)
		}
		return Member(a) < Member(b)
	})
	for i := range es {
		if byLess[i].Task != byRedis[i].Task || !byLess[i].DueAt.Equal(byRedis[i].DueAt) ||
			byLess[i].LogID != byRedis[i].LogID || byLess[i].Confirm != byRedis[i].Confirm {
			t.Fatalf("order differs at %d: Less %v, Redis %v", i, byLess[i], byRedis[i])
		}
	}
}

func TestMemberRoundTrip(t *testing.T) {
	for _, e := range []schedule.Entry{
		once(12, t0, 1),
		{Task: taskd.TaskKey{Kind: taskd.KindRotate, ID: 3}, DueAt: t0, Priority: 9, Space: 1440 * time.Minute},
		{Task: taskd.TaskKey{Kind: taskd.KindRotate, ID: 4}, DueAt: t0, Priority: 5, Space: time.Minute, End: t0.Add(time.Hour)},
		{Task: taskd.TaskKey{Kind: taskd.KindRotate, ID: 5}, DueAt: t0, Priority: 5, Cron: "30 2 * * 1-5;Europe/Berlin"},
		{Task: taskd.TaskKey{Kind: taskd.KindRotate, ID: 6}, DueAt: t0, Priority: 5, Cron: "0 * * * *;UTC", End: t0.Add(time.Hour),
			Windows: "0 1 * * *;Europe/Berlin;120&0 14 * * 6;UTC;30"},
		{Task: taskd.TaskKey{Kind: taskd.KindOnce, ID: 7}, DueAt: t0, Priority: 2, Windows: "0 1 * * *;UTC;60"},
		{LogID: "0190aaaa-bbbb-7ccc-8ddd-eeeeffff0000", DueAt: t0, Priority: 2, Windows: "0 1 * * *;UTC;60"},
		{Task: taskd.TaskKey{Kind: taskd.KindRotate, ID: 8}, DueAt: t0, Priority: 5, Space: time.Hour, Windows: "0 1 * * *;UTC;60"},
		{LogID: "L1", DueAt: t0, Priority: 3},
		{Task: taskd.TaskKey{Kind: taskd.KindRotate, ID: 9}, DueAt: t0, Priority: 5, Space: time.Hour, Misfire: taskd.MisfireLatest,
			Windows: "0 1 * * *;UTC;60"},
		{Task: taskd.TaskKey{Kind: taskd.KindRotate, ID: 10}, DueAt: t0, Priority: 5, Cron: "0 * * * *;UTC", Misfire: taskd.MisfireSkip},
		{LogID: "L2", DueAt: t0, Priority: 9, Confirm: true},
		{Task: taskd.TaskKey{Kind: taskd.KindOnce, ID: 11}, DueAt: t0, Priority: 5, DDI: true},
		{Task: taskd.TaskKey{Kind: taskd.KindRotate, ID: 12}, DueAt: t0, Priority: 5, Cron: "0 * * * *;UTC", Misfire: taskd.MisfireSkip,
			End: t0.Add(time.Hour), Windows: "0 1 * * *;UTC;60", DDI: true},
	} {
		got, err := ParseMember(Member(e), e.DueAt.Unix())
		if err != nil {
			t.Fatal(err)
		}
		if got != e {
			t.Fatalf("round trip: got %+v, want %+v", got, e)
		}
	}
	for _, bad := range []string{"", "x", "4|o", "4|x|1", "4|r|0000000000000000001", "4|r|1|0|0", "4|o|1|2", "4|r|1|60|0|9", "4|d|L1|x", "4|d|",
		"4|r|1|0|0|w=0 1 * * *;UTC;60", "4|r|1|60|0|c=0 1 * * *;UTC", "4|o|1|x=y", "0|c|", "4|r|1|60|0|m=x", "4|o|1|d=2"} {
		if _, err := ParseMember(bad, 0); err == nil {
			t.Errorf("ParseMember(%q): no error", bad)
		}
	}
}
