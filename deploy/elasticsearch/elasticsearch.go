// Package elasticsearch holds the Elasticsearch objects taskd's events need: the index
// template (explicit mappings for the daily indices prefix-YYYY.MM.DD) and the index
// lifecycle (ILM) policy that deletes them after the retention period.
//
// The JSON files next to this one are the source of truth, valid as they stand for
// curl (PUT _index_template/taskd-events, PUT _ilm/policy/taskd-events). The template
// file holds only what every server speaking the Elasticsearch API accepts
// (Elasticsearch 7.8 and later, OpenSearch): shards, replicas, refresh interval and the
// mappings, each field by its type alone (no parameter in one server's grammar, such as
// a date format). What some servers refuse (the link to the lifecycle policy, a _meta
// block) is added by IndexTemplate on request, and a plainer mapping for a server that
// refuses events under the full one is made by it too. The logsink embeds both files and installs
// them at start with the configured prefix and retention.
package elasticsearch

import (
	"embed"
	"encoding/json"
	"fmt"
)

//go:embed index-template.json ilm-policy.json
var files embed.FS

// TemplateOptions adds to the index template what not every server accepts, or takes
// from it what a server cannot apply.
type TemplateOptions struct {
	// Policy links the indices to the ILM policy of this name (the setting
	// index.lifecycle.name, which servers without ILM refuse as unknown); "" for none.
	Policy string
	// Meta adds a _meta block saying what the template is and who manages it.
	Meta bool
	// Mappings says how much of the explicit mappings the template carries.
	Mappings Mappings
}

// Mappings is how much of the explicit mappings an index template carries: all of
// them, or less for a server that refuses events under them.
type Mappings uint8

const (
	// FullMappings are the mappings as shipped: keyword ids, dates, numbers.
	FullMappings Mappings = iota
	// DatesAsKeywords maps the date fields as keywords, for a server whose date type
	// cannot parse the events' RFC 3339 times: they are kept and searchable as
	// strings, but time filters, date histograms and Kibana's time field do not work.
	DatesAsKeywords
	// NoMappings leaves every field to the server's dynamic mapping.
	NoMappings
)

// Dropped says what a template with m goes without, compared with FullMappings; "" for
// nothing.
func (m Mappings) Dropped() string {
	switch m {
	case DatesAsKeywords:
		return "the date type: at and due_at are mapped as keyword (kept and searchable as strings; " +
			"time filters, date histograms and the Kibana data view's time field do not work on them)"
	case NoMappings:
		return "every explicit mapping: the server maps each field itself (text where the Kibana objects expect keywords, " +
			"and its own choice for dates and numbers)"
	}
	return ""
}

// IndexTemplate returns the composable index template body for indices named
// prefix-*, with what opt asks for.
func IndexTemplate(prefix string, opt TemplateOptions) ([]byte, error) {
	var tpl map[string]any
	if err := load("index-template.json", &tpl); err != nil {
		return nil, err
	}
	tpl["index_patterns"] = []string{prefix + "-*"}
	tmpl, _ := tpl["template"].(map[string]any)
	settings, _ := tmpl["settings"].(map[string]any)
	if settings == nil {
		return nil, fmt.Errorf("index-template.json: no template.settings")
	}
	if opt.Policy != "" {
		settings["index.lifecycle.name"] = opt.Policy
	}
	switch opt.Mappings {
	case DatesAsKeywords:
		mappings, _ := tmpl["mappings"].(map[string]any)
		props, _ := mappings["properties"].(map[string]any)
		for name, p := range props {
			if field, _ := p.(map[string]any); field["type"] == "date" {
				props[name] = map[string]any{"type": "keyword"}
			}
		}
	case NoMappings:
		delete(tmpl, "mappings")
	}
	if opt.Meta {
		tpl["_meta"] = map[string]any{
			"description": "taskd dispatch lifecycle events, one index per UTC day of the event time (" + prefix + "-YYYY.MM.DD)",
			"managed_by":  "taskd logsink",
		}
	}
	return json.Marshal(tpl)
}

// LifecyclePolicy returns the ILM policy body that deletes an index retentionDays
// after its creation. Indices are daily by event time, so an index stops receiving
// events a day after it is created (bar replays of old events) and the age from
// creation is close to the age of its data.
func LifecyclePolicy(retentionDays int) ([]byte, error) {
	if retentionDays < 1 {
		return nil, fmt.Errorf("retention must be at least 1 day, got %d", retentionDays)
	}
	var pol map[string]any
	if err := load("ilm-policy.json", &pol); err != nil {
		return nil, err
	}
	p, _ := pol["policy"].(map[string]any)
	phases, _ := p["phases"].(map[string]any)
	del, _ := phases["delete"].(map[string]any)
	if del == nil {
		return nil, fmt.Errorf("ilm-policy.json: no delete phase")
	}
	del["min_age"] = fmt.Sprintf("%dd", retentionDays)
	// A phase may not start after the next one; with a short retention the warm phase
	// (force merge after two days) has no time to run, so it goes.
	if retentionDays <= 2 {
		delete(phases, "warm")
	}
	return json.Marshal(pol)
}

func load(name string, v any) error {
	b, err := files.ReadFile(name)
	if err != nil {
		return fmt.Errorf("embedded %s: %w", name, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("embedded %s: %w", name, err)
	}
	return nil
}
