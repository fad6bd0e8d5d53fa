package taskd

import (
	"testing"
	"time"
)

func TestWindowsOpenAt(t *testing.T) {
	// 01:00 to 03:00 in Berlin on weekdays, and Saturday 14:00 UTC for half an hour.
	ws := Windows{{Cron: "0 1 * * 1-5", Minutes: 120, TimeZone: "Europe/Berlin"}, {Cron: "0 14 * * 6", Minutes: 30}}
	if err := ws.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ at, want string }{
		{"2026-11-26T00:00:00Z", "2026-11-26T00:00:00Z"}, // Thursday 01:00 CET: open
		{"2026-11-26T01:59:59Z", "2026-11-26T01:59:59Z"}, // the last second
		{"2026-11-26T02:00:00Z", "2026-11-27T00:00:00Z"}, // closed: Friday's opens
		{"2026-11-27T12:00:00Z", "2026-11-28T14:00:00Z"}, // Friday noon: Saturday's
		{"2026-11-28T14:29:00Z", "2026-11-28T14:29:00Z"},
		{"2026-11-28T14:30:00Z", "2026-11-30T00:00:00Z"}, // then Monday 01:00 CET
		{"2026-07-01T00:30:00Z", "2026-07-01T00:30:00Z"}, // summer: 02:30 CEST is inside
		{"2026-07-01T01:00:00Z", "2026-07-01T23:00:00Z"}, // 03:00 CEST: closed
	} {
		got, ok := ws.OpenAt(utc(tc.at))
		if !ok || !got.Equal(utc(tc.want)) {
			t.Errorf("OpenAt(%s) = %s, %v; want %s", tc.at, got.Format(time.RFC3339), ok, tc.want)
		}
		if open := ws.Open(utc(tc.at)); open != (tc.at == tc.want) {
			t.Errorf("Open(%s) = %v", tc.at, open)
		}
	}
	if at, ok := Windows(nil).OpenAt(utc("2026-01-01T00:00:00Z")); !ok || !at.Equal(utc("2026-01-01T00:00:00Z")) {
		t.Error("no windows: not open at once")
	}
}

func TestWindowsKeyAndRefusals(t *testing.T) {
	ws := Windows{{Cron: " 0 1 * * 1-5 ", Minutes: 120, TimeZone: "Europe/Berlin"}, {Cron: "0 14 * * 6", Minutes: 30}}.Normalized()
	back, err := WindowsOf(ws.Key())
	if err != nil || back.Key() != ws.Key() || back[1].TimeZone != "UTC" || back[0].Cron != "0 1 * * 1-5" {
		t.Fatalf("WindowsOf(%q) = %v, %v", ws.Key(), back, err)
	}
	for _, tc := range []struct {
		ws   Windows
		want string
	}{
		{Windows{{Cron: "0 1 * * *", Minutes: 0}}, "windows[0].minutes"},
		{Windows{{Cron: "0 1 * * *", Minutes: 60}, {Cron: "0 1 * *", Minutes: 60}}, "windows[1].cron"},
		{Windows{{Cron: "0 1 * * *", Minutes: 60, TimeZone: "Nowhere/Land"}}, "windows[0].time_zone"},
		{make(Windows, MaxWindows+1), "windows: at most"},
	} {
		err := tc.ws.Validate()
		if err == nil || len(err.(*Error).Message) < len(tc.want) || err.(*Error).Message[:len(tc.want)] != tc.want {
			t.Errorf("Validate(%v) = %v, want %s", tc.ws, err, tc.want)
		}
	}
}

func TestWindowsAddOpen(t *testing.T) {
	// 01:00 to 03:00 UTC every night, and 02:30 to 04:00 on Saturdays (they overlap).
	ws := Windows{{Cron: "0 1 * * *", Minutes: 120}, {Cron: "30 2 * * 6", Minutes: 90}}
	for _, tc := range []struct {
		from string
		d    time.Duration
		want string
	}{
		{"2026-11-26T01:30:00Z", time.Hour, "2026-11-26T02:30:00Z"},         // inside, room enough
		{"2026-11-26T02:30:00Z", time.Hour, "2026-11-27T01:30:00Z"},         // half now, half the next night
		{"2026-11-26T12:00:00Z", 3 * time.Hour, "2026-11-28T02:00:00Z"},     // Thu night 2 h, Fri night 1 h
		{"2026-11-28T01:00:00Z", 150 * time.Minute, "2026-11-28T03:30:00Z"}, // Saturday: the spans join, 01:00 to 04:00
		{"2026-11-28T01:00:00Z", 4 * time.Hour, "2026-11-29T02:00:00Z"},     // 3 h Saturday, 1 h Sunday
	} {
		got, ok := ws.AddOpen(utc(tc.from), tc.d)
		if !ok || !got.Equal(utc(tc.want)) {
			t.Errorf("AddOpen(%s, %v) = %s, %v; want %s", tc.from, tc.d, got.Format(time.RFC3339), ok, tc.want)
		}
	}
}

// Windows that join end to end never close: a bake in them counts wall time, and
// AddOpen returns (it looped for ever before).
func TestWindowsAddOpenJoined(t *testing.T) {
	for _, ws := range []Windows{
		{{Cron: "0 * * * *", Minutes: 60}},
		{{Cron: "* * * * *", Minutes: 1}},
		{{Cron: "0 0 * * *", Minutes: 1440}},
	} {
		from := utc("2026-11-26T10:30:00Z")
		got, ok := ws.AddOpen(from, time.Hour)
		if !ok || !got.Equal(from.Add(time.Hour)) {
			t.Errorf("%v: AddOpen = %s, %v; want an hour later", ws, got, ok)
		}
	}
}
