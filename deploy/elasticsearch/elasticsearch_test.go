package elasticsearch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"testing"
)

func templateFields(t *testing.T) map[string]string {
	t.Helper()
	b, err := IndexTemplate("ev", TemplateOptions{Policy: "ev-policy", Meta: true})
	if err != nil {
		t.Fatal(err)
	}
	var tpl struct {
		IndexPatterns []string `json:"index_patterns"`
		Template      struct {
			Settings map[string]any `json:"settings"`
			Mappings struct {
				Properties map[string]struct {
					Type string `json:"type"`
				} `json:"properties"`
			} `json:"mappings"`
		} `json:"template"`
	}
	if err := json.Unmarshal(b, &tpl); err != nil {
		t.Fatal(err)
	}
	if len(tpl.IndexPatterns) != 1 || tpl.IndexPatterns[0] != "ev-*" {
		t.Fatalf("index patterns %v", tpl.IndexPatterns)
	}
	if tpl.Template.Settings["index.lifecycle.name"] != "ev-policy" {
		t.Fatalf("settings %v", tpl.Template.Settings)
	}
	fields := map[string]string{}
	for name, p := range tpl.Template.Mappings.Properties {
		fields[name] = p.Type
	}
	return fields
}

// Every field of taskd.Event is mapped explicitly, with the type queries rely on.
func TestIndexTemplateMapsEveryEventField(t *testing.T) {
	fields := templateFields(t)
	for name, typ := range map[string]string{
		"event_id": "keyword", "type": "keyword", "log_id": "keyword", "uid": "keyword",
		"task_id": "keyword", "kind": "keyword", "due_at": "date", "attempt": "integer",
		"result": "keyword", "latency_ms": "long", "final": "boolean", "node": "keyword", "at": "date",
		// Why a success counted as a failure (a result schema's verdict, or
		// "unconfirmed"), and a rollout event's unconfirmed successes.
		"reason": "keyword", "unconfirmed": "integer",
		// A missed event's run of occurrences (the task's misfire policy).
		"missed": "integer", "last_due_at": "date",
	} {
		if fields[name] != typ {
			t.Errorf("field %s mapped as %q, want %q", name, fields[name], typ)
		}
	}
}

func TestLifecyclePolicy(t *testing.T) {
	for days, wantWarm := range map[int]bool{1: false, 2: false, 30: true} {
		b, err := LifecyclePolicy(days)
		if err != nil {
			t.Fatal(err)
		}
		var p struct {
			Policy struct {
				Phases map[string]struct {
					MinAge  string         `json:"min_age"`
					Actions map[string]any `json:"actions"`
				} `json:"phases"`
			} `json:"policy"`
		}
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		del := p.Policy.Phases["delete"]
		if _, ok := del.Actions["delete"]; !ok || del.MinAge != itoa(days)+"d" {
			t.Fatalf("%d days: delete phase %+v", days, del)
		}
		if _, ok := p.Policy.Phases["warm"]; ok != wantWarm {
			t.Fatalf("%d days: warm phase present %v", days, ok)
		}
	}
	if _, err := LifecyclePolicy(0); err == nil {
		t.Fatal("retention 0 accepted")
	}
}

// portableAggs are the aggregations the Kibana objects may use.
var portableAggs = map[string]bool{"count": true, "date_histogram": true, "terms": true, "percentiles": true,
	"filters": true, "cumulative_sum": true, "avg": true, "sum": true, "min": true, "max": true, "cardinality": true}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// The Kibana saved objects parse, every reference resolves within the file, and every
// field a visualization uses is mapped by the index template.
func TestKibanaSavedObjects(t *testing.T) {
	f, err := os.Open("../kibana/saved_objects.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fields := templateFields(t)
	type ref struct{ Name, Type, ID string }
	type object struct {
		Type       string         `json:"type"`
		ID         string         `json:"id"`
		Attributes map[string]any `json:"attributes"`
		References []ref          `json:"references"`
	}
	var objs []object
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var o object
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatalf("line %d: %v", len(objs)+1, err)
		}
		objs = append(objs, o)
	}
	ids := map[string]bool{}
	count := map[string]int{}
	for _, o := range objs {
		ids[o.Type+"/"+o.ID] = true
		count[o.Type]++
	}
	if count["index-pattern"] != 1 || count["dashboard"] != 1 || count["visualization"] < 5 {
		t.Fatalf("objects by type: %v", count)
	}
	fieldRe := regexp.MustCompile(`"field":"([a-z_]+)"`)
	kqlRe := regexp.MustCompile(`([a-z_]+) : `)
	for _, o := range objs {
		for _, r := range o.References {
			if !ids[r.Type+"/"+r.ID] {
				t.Errorf("%s %s references missing %s %s", o.Type, o.ID, r.Type, r.ID)
			}
		}
		switch o.Type {
		case "index-pattern":
			if o.Attributes["title"] != "taskd-events-*" || o.Attributes["timeFieldName"] != "at" {
				t.Errorf("data view %v", o.Attributes)
			}
		case "visualization":
			vs, _ := o.Attributes["visState"].(string)
			var state map[string]any
			if err := json.Unmarshal([]byte(vs), &state); err != nil {
				t.Fatalf("%s visState: %v", o.ID, err)
			}
			meta, _ := o.Attributes["kibanaSavedObjectMeta"].(map[string]any)
			src, _ := meta["searchSourceJSON"].(string)
			if !json.Valid([]byte(src)) {
				t.Fatalf("%s searchSourceJSON is not JSON", o.ID)
			}
			// Aggregations every supported server has (Elasticsearch 7.10 to 9,
			// OpenSearch); a date histogram's interval is left to Kibana ("auto"),
			// which picks calendar or fixed intervals as the server wants them.
			aggs, _ := state["aggs"].([]any)
			for _, a := range aggs {
				agg, _ := a.(map[string]any)
				typ, _ := agg["type"].(string)
				if !portableAggs[typ] {
					t.Errorf("%s uses aggregation %q, not known to be on every supported server", o.ID, typ)
				}
				if params, _ := agg["params"].(map[string]any); typ == "date_histogram" && params["interval"] != "auto" {
					t.Errorf("%s: date_histogram interval %v, want auto", o.ID, params["interval"])
				}
			}
			for _, m := range append(fieldRe.FindAllStringSubmatch(vs, -1), kqlRe.FindAllStringSubmatch(vs+src, -1)...) {
				if fields[m[1]] == "" {
					t.Errorf("%s uses field %s, which the index template does not map", o.ID, m[1])
				}
			}
		case "dashboard":
			var panels []map[string]any
			if err := json.Unmarshal([]byte(o.Attributes["panelsJSON"].(string)), &panels); err != nil {
				t.Fatal(err)
			}
			names := map[string]bool{}
			for _, r := range o.References {
				names[r.Name] = true
			}
			for _, p := range panels {
				if !names[p["panelRefName"].(string)] {
					t.Errorf("panel %v has no reference", p["panelRefName"])
				}
			}
			if len(panels) != count["visualization"] {
				t.Errorf("%d panels for %d visualizations", len(panels), count["visualization"])
			}
		}
	}
}

// The template without options (and the file as it stands, for curl) holds only what
// every server speaking the API accepts; the rest comes only on request.
func TestIndexTemplateBaseIsPortable(t *testing.T) {
	universal := map[string]bool{"index.number_of_shards": true, "index.number_of_replicas": true, "index.refresh_interval": true}
	for name, opt := range map[string]TemplateOptions{"base": {}, "policy": {Policy: "p"}, "meta": {Meta: true}} {
		b, err := IndexTemplate("ev", opt)
		if err != nil {
			t.Fatal(err)
		}
		var tpl struct {
			Meta     map[string]any `json:"_meta"`
			Template struct {
				Settings map[string]any `json:"settings"`
			} `json:"template"`
		}
		if err := json.Unmarshal(b, &tpl); err != nil {
			t.Fatal(err)
		}
		for k := range tpl.Template.Settings {
			if !universal[k] && !(k == "index.lifecycle.name" && opt.Policy != "") {
				t.Errorf("%s: setting %s not every server accepts", name, k)
			}
		}
		if (tpl.Template.Settings["index.lifecycle.name"] == "p") != (opt.Policy != "") || (tpl.Meta != nil) != opt.Meta {
			t.Errorf("%s: template %s", name, b)
		}
	}
	raw, err := files.ReadFile("index-template.json")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("_meta")) || bytes.Contains(raw, []byte("lifecycle")) {
		t.Error("index-template.json holds what some servers refuse")
	}
}

// A field's mapping is its type alone. Parameters such as a date format are written in
// one server's grammar (a server that does not know Elasticsearch's refused every event
// under "format": "strict_date_optional_time||epoch_millis"), and the defaults mean the
// same on Elasticsearch: a date without a format parses RFC 3339 and epoch millis.
func TestIndexTemplateMappingsNameTypesOnly(t *testing.T) {
	b, err := IndexTemplate("ev", TemplateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var tpl struct {
		Template struct {
			Mappings struct {
				Properties map[string]map[string]any `json:"properties"`
			} `json:"mappings"`
		} `json:"template"`
	}
	if err := json.Unmarshal(b, &tpl); err != nil {
		t.Fatal(err)
	}
	for name, params := range tpl.Template.Mappings.Properties {
		for p := range params {
			if p != "type" {
				t.Errorf("field %s: mapping parameter %q", name, p)
			}
		}
	}
}

// A plainer mapping maps the dates as keywords, or nothing at all; the rest of the
// template stays.
func TestIndexTemplatePlainerMappings(t *testing.T) {
	for m, want := range map[Mappings]map[string]string{
		FullMappings:    {"at": "date", "due_at": "date", "uid": "keyword", "attempt": "integer"},
		DatesAsKeywords: {"at": "keyword", "due_at": "keyword", "uid": "keyword", "attempt": "integer"},
		NoMappings:      {},
	} {
		b, err := IndexTemplate("ev", TemplateOptions{Policy: "p", Mappings: m})
		if err != nil {
			t.Fatal(err)
		}
		var tpl struct {
			Template struct {
				Settings map[string]any `json:"settings"`
				Mappings *struct {
					Properties map[string]struct {
						Type string `json:"type"`
					} `json:"properties"`
				} `json:"mappings"`
			} `json:"template"`
		}
		if err := json.Unmarshal(b, &tpl); err != nil {
			t.Fatal(err)
		}
		if tpl.Template.Settings["index.lifecycle.name"] != "p" {
			t.Errorf("mappings %d: settings %v", m, tpl.Template.Settings)
		}
		if (tpl.Template.Mappings == nil) != (m == NoMappings) {
			t.Errorf("mappings %d: %s", m, b)
			continue
		}
		for field, typ := range want {
			if got := tpl.Template.Mappings.Properties[field].Type; got != typ {
				t.Errorf("mappings %d: %s mapped as %q, want %q", m, field, got, typ)
			}
		}
		if (m.Dropped() == "") != (m == FullMappings) {
			t.Errorf("mappings %d: dropped %q", m, m.Dropped())
		}
	}
}
