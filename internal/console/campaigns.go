package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
)

// Campaigns: the list with live progress and the moves each state allows, and a form
// for a count campaign.

// campaignMoves are the moves a campaign's state allows, as the admin API has them.
func campaignMoves(state string) []string {
	switch state {
	case "created", "stopped":
		return []string{"start"}
	case "running":
		return []string{"pause", "stop"}
	case "paused":
		return []string{"resume", "stop"}
	}
	return nil
}

func (c *Console) campaigns(w http.ResponseWriter, r *http.Request) {
	c.campaignsPage(w, r, http.StatusOK, map[string]any{})
}

func (c *Console) campaignsPage(w http.ResponseWriter, r *http.Request, status int, data map[string]any) {
	var body struct{ Campaigns []map[string]any }
	if !c.fetch(w, r, "/v1/admin/campaigns?limit=100", &body) {
		return
	}
	data["Campaigns"] = body.Campaigns
	c.render(w, r, status, "campaigns", "Campaigns", data)
}

func (c *Console) createCampaign(w http.ResponseWriter, r *http.Request) {
	form := map[string]string{}
	for _, k := range []string{"name", "template_id", "params", "executor", "count", "rate"} {
		form[k] = strings.TrimSpace(r.PostFormValue(k))
	}
	fail := func(status int, msg string) {
		c.campaignsPage(w, r, status, map[string]any{"Form": form, "Error": msg})
	}
	body := map[string]any{"name": form["name"], "executor": form["executor"]}
	for _, f := range []struct{ field, name string }{
		{"template_id", "Template id"}, {"count", "Items"}, {"rate", "Items per second"},
	} {
		if _, err := strconv.ParseFloat(form[f.field], 64); err != nil {
			fail(http.StatusBadRequest, f.name+": not a number")
			return
		}
	}
	body["template_id"], body["rate_per_second"] = json.Number(form["template_id"]), json.Number(form["rate"])
	body["items"] = map[string]any{"count": json.Number(form["count"])}
	if p := form["params"]; p != "" {
		var params json.RawMessage
		if err := json.Unmarshal([]byte(p), &params); err != nil {
			fail(http.StatusBadRequest, "Params: not JSON: "+err.Error())
			return
		}
		body["params"] = params
	}
	res, ok := c.api(w, r, http.MethodPost, "/v1/admin/campaigns", body)
	if !ok {
		return
	}
	if !res.ok() {
		fail(res.status, res.message())
		return
	}
	http.Redirect(w, r, "/console/campaigns", http.StatusSeeOther)
}

func (c *Console) moveCampaign(w http.ResponseWriter, r *http.Request) {
	id, move := chi.URLParam(r, "id"), chi.URLParam(r, "move")
	if _, ok := c.change(w, r, http.MethodPost, "/v1/admin/campaigns/"+url.PathEscape(id)+"/"+url.PathEscape(move), nil,
		"campaigns", "Campaigns", map[string]any{}); !ok {
		return
	}
	http.Redirect(w, r, "/console/campaigns", http.StatusSeeOther)
}
