package console

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/taskpull/taskd"
)

// DDI deployments on the console: a task of a DDI template shows its deployment (the
// chunks and their artifacts) and, per device that took it, where the device is, read
// from the newest dispatch record of its uid: the controller's latest feedback is the
// open record's checkpoint, its closing feedback a finished record's detail.

// maxDevicesShown bounds the dispatch records a task's page reads (the newest); a task
// of a larger group says it shows only these.
const maxDevicesShown = 1000

// deploymentView is what a DDI task's page shows.
type deploymentView struct {
	Chunks  []chunkView
	Devices []deviceView
	// More says the task has more records than were read: the devices shown are those
	// of the newest.
	More bool
	// ParamsError says the params could not be read as a deployment.
	ParamsError string
}

type chunkView struct {
	Part, Name, Version string
	Artifacts           []artifactView
}

// artifactView is a file of a chunk: an uploaded artifact (ID), or one elsewhere (URL).
type artifactView struct {
	ID       int64
	Filename string
	Size     int64
	URL      string
	// Unread says why the artifact ID names was not read: the server no longer has
	// it, say.
	Unread string
}

// deviceView is one device's place in the deployment.
type deviceView struct {
	UID, LogID   string
	State, Note  string
	Attempt      int
	DispatchedAt time.Time
	// At is when the device last gave feedback (zero: never).
	At time.Time
}

// ddiFeedback is a controller's feedback as a dispatch keeps it (dispatch.DDIFeedback's
// record): the checkpoint of an open action, the detail of a closed one.
type ddiFeedback struct {
	Execution string `json:"execution"`
	Finished  string `json:"finished"`
	Progress  *struct {
		Cnt int `json:"cnt"`
		Of  int `json:"of"`
	} `json:"progress"`
	Details []string  `json:"details"`
	At      time.Time `json:"at"`
}

// readFeedback reads a record's checkpoint or detail as feedback; ok is false for none,
// or for one that is not a controller's.
func readFeedback(raw json.RawMessage) (f ddiFeedback, ok bool) {
	if len(raw) == 0 || json.Unmarshal(raw, &f) != nil {
		return ddiFeedback{}, false
	}
	return f, f.Execution != ""
}

// allInstalled is what SWUpdate reports, proceeding, once it has installed every chunk
// and waits for the reboot that activates them.
const allInstalled = "All Chunks Installed."

// The states a device's record shows.
const (
	ddiWaiting     = "waiting"
	ddiDownloading = "downloading"
	ddiInstalled   = "installed, waiting for reboot"
	ddiDone        = "done"
	ddiFailed      = "failed"
	ddiCancelled   = "cancelled"
	ddiExpired     = "expired"
)

// ddiDeviceState is where a device is in its deployment, by its dispatch record, and
// a note for people (the last detail line the controller sent, its progress).
func ddiDeviceState(rec taskd.DispatchRecord) (state, note string) {
	cp, fed := readFeedback(rec.Checkpoint)
	end, closed := readFeedback(rec.Detail)
	result := ""
	if rec.Result != nil {
		result = *rec.Result
	}
	switch {
	case rec.State == "cancelled" || rec.CancelledAt != nil:
		return ddiCancelled, "by an admin"
	case closed && end.Execution == "canceled":
		return ddiCancelled, joinNote("by the device", lastLine(end.Details))
	case result == "success":
		if rec.State == "unconfirmed" {
			return ddiDone, joinNote("counts once the device polls again", lastLine(end.Details))
		}
		return ddiDone, lastLine(end.Details)
	case result == "failure":
		note := lastLine(end.Details)
		if note == "" && closed && end.Execution != "closed" {
			note = end.Execution // rejected, with no word why
		}
		if note == "" {
			note = rec.Reason
		}
		return ddiFailed, note
	case rec.State == "expired":
		return ddiExpired, "the device gave no word within the lease"
	case rec.State != "open":
		return rec.State, ""
	case !fed:
		return ddiWaiting, "no feedback yet"
	case slices.ContainsFunc(cp.Details, func(d string) bool { return strings.Contains(d, allInstalled) }):
		return ddiInstalled, lastLine(cp.Details)
	}
	progress := ""
	if cp.Progress != nil && cp.Progress.Of > 0 {
		progress = strconv.Itoa(cp.Progress.Cnt) + " of " + strconv.Itoa(cp.Progress.Of)
	}
	return ddiDownloading, joinNote(progress, lastLine(cp.Details))
}

// lastLine is the last non-empty detail line.
func lastLine(details []string) string {
	for i := len(details) - 1; i >= 0; i-- {
		if d := strings.TrimSpace(details[i]); d != "" {
			return d
		}
	}
	return ""
}

func joinNote(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "; " + b
}

// feedbackAt is when the controller last gave feedback on rec (zero: never).
func feedbackAt(rec taskd.DispatchRecord) time.Time {
	if end, ok := readFeedback(rec.Detail); ok {
		return end.At
	}
	cp, _ := readFeedback(rec.Checkpoint)
	return cp.At
}

// devicesOf are the devices of records (newest first): each uid once, by its newest
// record.
func devicesOf(records []taskd.DispatchRecord) []deviceView {
	seen := map[string]bool{}
	var out []deviceView
	for _, rec := range records {
		if seen[rec.UID] {
			continue
		}
		seen[rec.UID] = true
		state, note := ddiDeviceState(rec)
		out = append(out, deviceView{UID: rec.UID, LogID: rec.LogID, State: state, Note: note, Attempt: rec.Attempt,
			DispatchedAt: rec.DispatchedAt, At: feedbackAt(rec)})
	}
	slices.SortStableFunc(out, func(a, b deviceView) int { return strings.Compare(a.UID, b.UID) })
	return out
}

// taskDeployment reads what a DDI task's page shows: its deployment, with each
// uploaded artifact's name and size, and its devices. A uid task's device that has not
// polled for it yet is waiting.
func (c *Console) taskDeployment(w http.ResponseWriter, r *http.Request, t map[string]any) (*deploymentView, bool) {
	view := &deploymentView{}
	raw, _ := json.Marshal(t["params"])
	dep, err := taskd.ParseDeployment(raw)
	if err != nil {
		view.ParamsError = err.Error()
	}
	known := map[int64]artifactView{}
	for _, ch := range dep.Chunks {
		cv := chunkView{Part: ch.Part, Name: ch.Name, Version: ch.Version}
		for _, a := range ch.Artifacts {
			if a.ArtifactID == 0 {
				cv.Artifacts = append(cv.Artifacts, artifactView{Filename: a.Filename, Size: a.Size, URL: a.URL})
				continue
			}
			av, found := known[a.ArtifactID]
			if !found {
				av = artifactView{ID: a.ArtifactID}
				res, ok := c.api(w, r, http.MethodGet, "/v1/admin/artifacts/"+strconv.FormatInt(a.ArtifactID, 10), nil)
				if !ok {
					return nil, false
				}
				var up taskd.Artifact
				switch {
				case res.status == http.StatusNotFound:
					av.Unread = "no longer on the server"
				case !res.ok():
					av.Unread = "not read: " + res.message()
				case res.decode(&up) != nil:
					av.Unread = "not read: the server's reply could not be read"
				default:
					av.Filename, av.Size = up.Filename, up.Size
				}
				known[a.ArtifactID] = av
			}
			cv.Artifacts = append(cv.Artifacts, av)
		}
		view.Chunks = append(view.Chunks, cv)
	}

	var body struct {
		Dispatches []taskd.DispatchRecord `json:"dispatches"`
		NextCursor string                 `json:"next_cursor"`
	}
	taskID, _ := t["task_id"].(string)
	if !c.fetch(w, r, query("/v1/admin/dispatches", "task_id", taskID, "limit", strconv.Itoa(maxDevicesShown)), &body) {
		return nil, false
	}
	view.Devices, view.More = devicesOf(body.Dispatches), body.NextCursor != ""
	if executor, _ := t["executor"].(string); len(view.Devices) == 0 && strings.HasPrefix(executor, "uid_") {
		view.Devices = []deviceView{{UID: strings.TrimPrefix(executor, "uid_"), State: ddiWaiting, Note: "has not polled for it yet"}}
	}
	return view, true
}
