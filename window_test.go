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
