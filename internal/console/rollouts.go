package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-chi/chi/v5"
)

// Rollouts on the console: a task's page shows its rollout (a phase bar, the gate's
// figures, the moves the state allows) and a form to set, change or remove it (the
// rollout as JSON, saved by a merge patch of the task); the dashboard lists the
// running and waiting rollouts.

// taskRollout reads task t's rollout for its page; nil for a task without one.
func (c *Console) taskRollout(w http.ResponseWriter, r *http.Request, t map[string]any) (map[string]any, bool) {
	if t["rollout"] == nil {
		return nil, true
	}
	var ro map[string]any
	if !c.fetch(w, r, taskPath(r)+"/rollout", &ro) {
		return nil, false
	}
	return ro, true
}

// phaseBar is the rollout's phases for the bar: each phase's label, and whether it is
// done, the current one, or ahead.
func phaseBar(ro map[string]any) []map[string]any {
	spec, _ := ro["rollout"].(map[string]any)
	phases, _ := spec["phases"].([]any)
	current := int(num(ro["phase"]))
	completed := ro["state"] == "completed"
	out := make([]map[string]any, 0, len(phases))
	for i, p := range phases {
		m, _ := p.(map[string]any)
		label := ""
		if v, ok := m["percent"]; ok {
			label = strings.TrimSuffix(strings.TrimSuffix(jsonNumber(v), ".0"), ".00") + "%"
		} else {
			label = "up to " + jsonNumber(m["count"])
		}
		state := "ahead"
		switch {
		case completed || i+1 < current:
			state = "done"
		case i+1 == current:
			state = "current"
		}
		out = append(out, map[string]any{"Label": label, "State": state, "N": i + 1})
	}
	return out
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// rolloutMoves are the moves a rollout's state allows, as the API decides them.
func rolloutMoves(state any) []string {
	switch state {
	case "running", "baking", "waiting":
		return []string{"advance", "pause", "abort"}
	case "paused":
		return []string{"resume", "abort"}
	}
	return nil
}

// moveRollout is a move's button on the task page.
func (c *Console) moveRollout(w http.ResponseWriter, r *http.Request) {
	move := chi.URLParam(r, "move")
	if _, ok := c.change(w, r, http.MethodPost, taskPath(r)+"/rollout/"+url.PathEscape(move), nil, "error", "Rollout", map[string]any{}); !ok {
		return
	}
	http.Redirect(w, r, "/console/tasks/"+url.PathEscape(chi.URLParam(r, "kind"))+"/"+url.PathEscape(chi.URLParam(r, "id")), http.StatusSeeOther)
}

// setRollout saves the task's rollout from its form: JSON (empty removes it).
func (c *Console) setRollout(w http.ResponseWriter, r *http.Request) {
	text := strings.TrimSpace(r.PostFormValue("rollout"))
	var rollout any
	if text != "" {
		if err := json.Unmarshal([]byte(text), &rollout); err != nil {
			c.render(w, r, http.StatusBadRequest, "error", "Rollout", map[string]any{"Error": "The rollout is not JSON: " + err.Error()})
			return
		}
	}
	if _, ok := c.change(w, r, http.MethodPatch, taskPath(r), map[string]any{"rollout": rollout}, "error", "Rollout", map[string]any{}); !ok {
		return
	}
	http.Redirect(w, r, "/console/tasks/"+url.PathEscape(chi.URLParam(r, "kind"))+"/"+url.PathEscape(chi.URLParam(r, "id")), http.StatusSeeOther)
}

// exampleRollout is what the form offers a task without a rollout: its gate (5
// successes) fits the first phase of a once task of a quota of 100 or more, and any
// rotating task without an end (a gate no phase can meet is refused).
const exampleRollout = `{
  "phases": [{"percent": 5}, {"percent": 25}, {"percent": 100}],
  "gate": {"min_finished": 5, "success_ratio": 0.95, "failure_ratio": 0.2},
  "advance": "auto",
  "bake_seconds": 600,
  "targeting": "continuous"
}`
