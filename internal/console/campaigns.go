package console

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
)

// Campaigns: the list with live progress and the moves each state allows, a form for
// a count campaign, and a campaign's page with its latest failures.

// budgetPaused reports whether campaign c (as the admin API has it) was paused by its
// error budget, which the reason says.
func budgetPaused(c map[string]any) bool {
	reason, _ := c["reason"].(string)
	return c["state"] == "paused" && strings.HasPrefix(reason, "error budget")
}

// campaign is a campaign's page: its settings and numbers, the moves its state allows
// and its latest failures with their detail (kept by the server without Kafka).
func (c *Console) campaign(w http.ResponseWriter, r *http.Request) {
	id := url.PathEscape(chi.URLParam(r, "id"))
	var camp map[string]any
	if !c.fetch(w, r, "/v1/admin/campaigns/"+id, &camp) {
		return
	}
	var failures map[string]any
	if !c.fetch(w, r, "/v1/admin/campaigns/"+id+"/failures", &failures) {
		return
	}
	c.render(w, r, http.StatusOK, "campaign", "Campaign "+fmt.Sprint(camp["name"]), map[string]any{
		"Campaign": camp, "Failures": failures, "BudgetPaused": budgetPaused(camp)})
}

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
	back := "/console/campaigns"
	if r.PostFormValue("from") == "campaign" {
		back += "/" + url.PathEscape(id)
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}
