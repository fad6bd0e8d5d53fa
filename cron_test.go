package taskd

import (
	"testing"
	"time"
)

func mustCron(t *testing.T, expr, zone string) *Cron {
	t.Helper()
	c, err := ParseCron(expr, zone)
	if err != nil {
		t.Fatalf("ParseCron(%q, %q): %v", expr, zone, err)
	}
	return c
}

// occurrences lists c's occurrences after from, n of them.
func occurrences(t *testing.T, c *Cron, from time.Time, n int) []string {
	t.Helper()
	var out []string
	at := from
	for range n {
		next, ok := c.After(at)
		if !ok {
			t.Fatalf("%s: no occurrence after %s", c.Key(), at)
		}
		out = append(out, next.UTC().Format(time.RFC3339))
		at = next
	}
	return out
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestCronDaylightSavingInARealZone(t *testing.T) {
	for _, tc := range []struct {
		name, expr, zone, from string
		want                   []string
	}{
		{
			// Berlin, 29 March 2026: 02:00 CET becomes 03:00 CEST. 02:30 does not
			// exist that day: it happens at the first instant after the gap, 03:00
			// CEST (01:00 UTC); the days around it keep their wall time.
			name: "spring forward, the missing wall time", expr: "30 2 * * *", zone: "Europe/Berlin",
			from: "2026-03-27T12:00:00Z",
			want: []string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"},
		},
		{
			// Every 20 minutes through the gap: 02:00, 02:20 and 02:40 all fall at
			// 03:00 CEST, once.
			name: "spring forward, several missing wall times", expr: "*/20 1-3 29 3 *", zone: "Europe/Berlin",
			from: "2026-03-29T00:00:00Z",
			want: []string{"2026-03-29T00:20:00Z", "2026-03-29T00:40:00Z", "2026-03-29T01:00:00Z", "2026-03-29T01:20:00Z", "2026-03-29T01:40:00Z"},
		},
		{
			// Berlin, 25 October 2026: 03:00 CEST becomes 02:00 CET. 02:30 happens
			// twice; the task runs once, the first time (00:30 UTC), not at 01:30 UTC.
			name: "fall back, the repeated wall time", expr: "30 2 * * *", zone: "Europe/Berlin",
			from: "2026-10-24T12:00:00Z",
			want: []string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"},
		},
		{
			// Hourly across the change back: 02:00 once (00:00 UTC), then 03:00 CET.
			name: "fall back, hourly", expr: "0 * 25 10 *", zone: "Europe/Berlin",
			from: "2026-10-24T23:30:00Z",
			want: []string{"2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z", "2026-10-25T03:00:00Z"},
		},
		{
			// New York, 8 March 2026: 02:00 EST becomes 03:00 EDT.
			name: "New York spring forward", expr: "15 2 * * *", zone: "America/New_York",
			from: "2026-03-07T12:00:00Z",
			want: []string{"2026-03-08T07:00:00Z", "2026-03-09T06:15:00Z"},
		},
		{
			// New York, 1 November 2026: 02:00 EDT becomes 01:00 EST; 01:30 twice.
			name: "New York fall back", expr: "30 1 * * *", zone: "America/New_York",
			from: "2026-10-31T12:00:00Z",
			want: []string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"},
		},
		{
			// Santiago, 6 September 2026: midnight -04 becomes 01:00 -03. The day's
			// midnight does not exist: it happens at 01:00 -03 (04:00 UTC).
			name: "a gap at midnight, Santiago", expr: "@daily", zone: "America/Santiago",
			from: "2026-09-05T12:00:00Z",
			want: []string{"2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z"},
		},
		{
			// Havana, 8 March 2026: midnight CST becomes 01:00 CDT.
			name: "a gap at midnight, Havana", expr: "0 0 * * *", zone: "America/Havana",
			from: "2026-03-07T12:00:00Z",
			want: []string{"2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"},
		},
		{
			name: "UTC by default, weekdays at nine", expr: "0 9 * * 1-5", zone: "",
			from: "2026-11-27T10:00:00Z", // a Friday
			want: []string{"2026-11-30T09:00:00Z", "2026-12-01T09:00:00Z"},
		},
		{
			// Day of month and day of week both given: either matches (cron's rule).
			name: "dom or dow", expr: "0 0 1 * 0", zone: "UTC",
			from: "2026-11-28T00:00:00Z",
			want: []string{"2026-11-29T00:00:00Z", "2026-12-01T00:00:00Z", "2026-12-06T00:00:00Z"},
		},
		{
			name: "a descriptor", expr: "@daily", zone: "Asia/Tokyo",
			from: "2026-11-28T00:00:00Z",
			want: []string{"2026-11-28T15:00:00Z", "2026-11-29T15:00:00Z"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCron(t, tc.expr, tc.zone)
			got := occurrences(t, c, utc(tc.from), len(tc.want))
			for i := range tc.want {
				if got[i] != tc.want[i] {
					t.Fatalf("occurrences after %s:\n got %v\nwant %v", tc.from, got, tc.want)
				}
			}
			for _, w := range tc.want {
				if !c.Has(utc(w)) {
					t.Errorf("Has(%s) = false", w)
				}
				if f, _ := c.First(utc(w)); !f.Equal(utc(w)) {
					t.Errorf("First(%s) = %s", w, f)
				}
			}
		})
	}
}

func TestCronHasOnlyItsOccurrences(t *testing.T) {
	c := mustCron(t, "30 2 * * *", "Europe/Berlin")
	for _, s := range []string{
		"2026-10-25T01:30:00Z", // the second 02:30 of the day clocks go back
		"2026-03-29T01:30:00Z", // 03:30 CEST on the day of the gap
		"2026-03-28T01:31:00Z",
	} {
		if c.Has(utc(s)) {
			t.Errorf("Has(%s) = true", s)
		}
	}
}

func TestParseCronRefusals(t *testing.T) {
	for _, tc := range []struct {
		expr, zone string
		code       Code
		field      string
	}{
		{"0 0 30 2 *", "", CodeUnsatisfiable, "cron"},
		{"0 0 31 4,6,9,11 *", "", CodeUnsatisfiable, "cron"},
		{"61 * * * *", "", CodeInvalid, "cron"},
		{"* * * *", "", CodeInvalid, "cron"},
		{"0 0 * * * *", "", CodeInvalid, "cron"},
		{"", "", CodeInvalid, "cron"},
		{"@every 5m", "", CodeInvalid, "cron"},
		{"CRON_TZ=Europe/Berlin 0 0 * * *", "", CodeInvalid, "cron"},
		{"0 0 * * *", "Mars/Olympus", CodeInvalid, "time_zone"},
		{"0 0 * * *", "Local", CodeInvalid, "time_zone"},
		{"0 0 * * *", "Europe/Berlin;x", CodeInvalid, "time_zone"},
	} {
		_, err := ParseCron(tc.expr, tc.zone)
		e, ok := err.(*Error)
		if !ok || e.Code != tc.code || len(e.Message) < len(tc.field) || e.Message[:len(tc.field)] != tc.field {
			t.Errorf("ParseCron(%q, %q) = %v, want %s naming %s", tc.expr, tc.zone, err, tc.code, tc.field)
		}
	}
	// 29 February comes round.
	mustCron(t, "0 0 29 2 *", "")
	c := mustCron(t, "0 12 29 2 1", "UTC") // dom or dow: every Monday too
	if _, ok := c.After(utc("2026-11-28T00:00:00Z")); !ok {
		t.Error("29 February or Mondays: no occurrence")
	}
}

func TestCronOfKey(t *testing.T) {
	c := mustCron(t, "0 9 * * 1-5", "Europe/Berlin")
	back, err := CronOf(c.Key())
	if err != nil || back.Key() != c.Key() {
		t.Fatalf("CronOf(%q) = %v, %v", c.Key(), back, err)
	}
	if _, err := CronOf("no zone"); err == nil {
		t.Error("CronOf of a key without a zone: no error")
	}
}

func BenchmarkCronAfterEveryMinute(b *testing.B) {
	c, _ := ParseCron("* * * * *", "Europe/Berlin")
	at := utc("2026-11-28T10:00:30Z")
	for b.Loop() {
		c.After(at)
	}
}
