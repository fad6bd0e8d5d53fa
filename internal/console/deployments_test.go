package console

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/taskpull/taskd"
)

// A device's state in a deployment, from its dispatch record: the checkpoint of an
// open one (the controller's latest feedback), the detail and result of a finished one.
func TestDDIDeviceState(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	fb := func(execution, finished string, cnt, of int, details ...string) json.RawMessage {
		f := map[string]any{"execution": execution, "at": at}
		if finished != "" {
			f["finished"] = finished
		}
		if of > 0 {
			f["progress"] = map[string]int{"cnt": cnt, "of": of}
		}
		if details != nil {
			f["details"] = details
		}
		b, _ := json.Marshal(f)
		return b
	}
	result := func(s string) *string { return &s }
	for _, c := range []struct {
		name        string
		rec         taskd.DispatchRecord
		state, note string
	}{
		{"claimed, no feedback yet", taskd.DispatchRecord{State: "open"}, "waiting", "no feedback yet"},
		{"a null checkpoint", taskd.DispatchRecord{State: "open", Checkpoint: json.RawMessage("null")}, "waiting", "no feedback yet"},
		{"an agent's checkpoint, not a controller's", taskd.DispatchRecord{State: "open", Checkpoint: json.RawMessage(`{"step":3}`)}, "waiting", "no feedback yet"},
		{"downloading", taskd.DispatchRecord{State: "open", Checkpoint: fb("download", "none", 1, 3, "Downloading fw.swu")},
			"downloading", "1 of 3; Downloading fw.swu"},
		{"downloaded", taskd.DispatchRecord{State: "open", Checkpoint: fb("downloaded", "none", 0, 0)}, "downloading", ""},
		{"proceeding, installing", taskd.DispatchRecord{State: "open", Checkpoint: fb("proceeding", "none", 2, 3, "Installing chunk 2", "")},
			"downloading", "2 of 3; Installing chunk 2"},
		{"installed, waiting for its reboot", taskd.DispatchRecord{State: "open",
			Checkpoint: fb("proceeding", "none", 1, 1, "Installation in progress", "All Chunks Installed.")},
			"installed, waiting for reboot", "All Chunks Installed."},
		{"done", taskd.DispatchRecord{State: "done", Result: result("success"), Detail: fb("closed", "success", 0, 0, "Update succeeded")},
			"done", "Update succeeded"},
		{"done, to be confirmed by its next poll", taskd.DispatchRecord{State: "unconfirmed", Result: result("success"), Detail: fb("closed", "success", 0, 0)},
			"done", "counts once the device polls again"},
		{"failed, with the last detail line", taskd.DispatchRecord{State: "dead", Result: result("failure"),
			Detail: fb("closed", "failure", 0, 0, "Installation failed", "hardware mismatch")}, "failed", "hardware mismatch"},
		{"failed, to be retried", taskd.DispatchRecord{State: "retry_wait", Result: result("failure"),
			Detail: fb("closed", "failure", 0, 0, "disk full")}, "failed", "disk full"},
		{"rejected by the device", taskd.DispatchRecord{State: "dead", Result: result("failure"), Detail: fb("rejected", "none", 0, 0)},
			"failed", "rejected"},
		{"a success that counted as a failure", taskd.DispatchRecord{State: "dead", Result: result("failure"), Reason: "not confirmed"},
			"failed", "not confirmed"},
		{"cancelled by an admin", taskd.DispatchRecord{State: "cancelled", Checkpoint: fb("download", "none", 1, 3)}, "cancelled", "by an admin"},
		{"cancelled by the device", taskd.DispatchRecord{State: "dead", Result: result("failure"), Detail: fb("canceled", "none", 0, 0, "user abort")},
			"cancelled", "by the device; user abort"},
		{"expired", taskd.DispatchRecord{State: "expired"}, "expired", "the device gave no word within the lease"},
	} {
		state, note := ddiDeviceState(c.rec)
		if state != c.state || note != c.note {
			t.Errorf("%s: %q, %q; want %q, %q", c.name, state, note, c.state, c.note)
		}
	}
}

// Each device once, by its newest record (records come newest first), sorted by uid;
// its last feedback's time from the detail or the checkpoint.
func TestDevicesOfRecords(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cp, _ := json.Marshal(map[string]any{"execution": "download", "at": at})
	failure := "failure"
	devices := devicesOf([]taskd.DispatchRecord{
		{UID: "b", LogID: "3", State: "open", Attempt: 2, Checkpoint: cp},
		{UID: "a", LogID: "2", State: "open"},
		{UID: "b", LogID: "1", State: "retry_wait", Result: &failure, Attempt: 1},
	})
	if len(devices) != 2 || devices[0].UID != "a" || devices[0].State != "waiting" || !devices[0].At.IsZero() ||
		devices[1].UID != "b" || devices[1].LogID != "3" || devices[1].State != "downloading" || !devices[1].At.Equal(at) {
		t.Fatalf("devices: %+v", devices)
	}
}
