// Package elasticsearch holds the Elasticsearch objects taskd's events need: the index
// template (explicit mappings for the daily indices prefix-YYYY.MM.DD) and the index
// lifecycle (ILM) policy that deletes them after the retention period.
//
// The JSON files next to this one are the source of truth, valid as they stand for
// curl (PUT _index_template/taskd-events, PUT _ilm/policy/taskd-events). The template
// file holds only what every server speaking the Elasticsearch API accepts
// (Elasticsearch 7.8 and later, OpenSearch): shards, replicas, refresh interval and the
// mappings. What some servers refuse (the link to the lifecycle policy, a _meta block)
// is added by IndexTemplate on request. The logsink embeds both files and installs
// them at start with the configured prefix and retention.
package elasticsearch

import (
	"embed"
	"encoding/json"
	"fmt"
)

//go:embed index-template.json ilm-policy.json
var files embed.FS

// TemplateOptions adds to the index template what not every server accepts.
type TemplateOptions struct {
	// Policy links the indices to the ILM policy of this name (the setting
	// index.lifecycle.name, which servers without ILM refuse as unknown); "" for none.
	Policy string
	// Meta adds a _meta block saying what the template is and who manages it.
	Meta bool
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
