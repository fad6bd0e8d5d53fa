package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Markdown renders Document as the HTTP contract for people (docs/API.md): every route
// with its parameters, body and statuses, then every schema with its fields. The file is
// generated, never edited, so the two cannot drift apart; this package's tests fail when
// docs/API.md is not what Markdown renders (go test ./api -update rewrites it).
func Markdown() ([]byte, error) {
	var doc struct {
		Info struct {
			Title, Version, Description string
		}
		Tags  []struct{ Name, Description string }
		Paths map[string]map[string]json.RawMessage
		Comp  struct {
			Schemas    map[string]schema
			Responses  map[string]response
			Parameters map[string]parameter
		} `json:"components"`
	}
	if err := json.Unmarshal(Document, &doc); err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s %s\n\n", doc.Info.Title, doc.Info.Version)
	b.WriteString("<!-- Generated from api/openapi.json by `go test ./api -update`; do not edit. -->\n\n")
	b.WriteString(strings.TrimSpace(doc.Info.Description) + "\n\n")

	type route struct {
		path, method string
		op           operation
		shared       []parameter
	}
	byTag := map[string][]route{}
	for _, path := range sortedKeys(doc.Paths) {
		item := doc.Paths[path]
		var shared []parameter
		if raw, ok := item["parameters"]; ok {
			if err := json.Unmarshal(raw, &shared); err != nil {
				return nil, fmt.Errorf("%s parameters: %w", path, err)
			}
		}
		for _, method := range []string{"get", "head", "post", "put", "patch", "delete"} {
			raw, ok := item[method]
			if !ok {
				continue
			}
			var op operation
			if err := json.Unmarshal(raw, &op); err != nil {
				return nil, fmt.Errorf("%s %s: %w", method, path, err)
			}
			tag := "other"
			if len(op.Tags) > 0 {
				tag = op.Tags[0]
			}
			byTag[tag] = append(byTag[tag], route{path, strings.ToUpper(method), op, shared})
		}
	}
	tags := doc.Tags
	for tag := range byTag {
		known := false
		for _, t := range tags {
			known = known || t.Name == tag
		}
		if !known {
			tags = append(tags, struct{ Name, Description string }{tag, ""})
		}
	}
	b.WriteString("## Routes\n\n")
	for _, tag := range tags {
		routes := byTag[tag.Name]
		if len(routes) == 0 {
			continue
		}
		fmt.Fprintf(&b, "### %s\n\n", tag.Name)
		if tag.Description != "" {
			b.WriteString(tag.Description + "\n\n")
		}
		for _, rt := range routes {
			fmt.Fprintf(&b, "#### `%s %s`\n\n", rt.method, rt.path)
			if rt.op.Summary != "" {
				b.WriteString(oneParagraph(rt.op.Summary) + "\n\n")
			}
			if rt.op.Description != "" {
				b.WriteString(strings.TrimSpace(rt.op.Description) + "\n\n")
			}
			params := append(append([]parameter{}, rt.shared...), rt.op.Parameters...)
			if len(params) > 0 {
				b.WriteString("| Parameter | In | Required | Description |\n|---|---|---|---|\n")
				for _, p := range params {
					if p.Ref != "" {
						p = doc.Comp.Parameters[refName(p.Ref)]
					}
					fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", p.Name, p.In, yesNo(p.Required), cell(p.Description))
				}
				b.WriteString("\n")
			}
			if rt.op.RequestBody != nil {
				fmt.Fprintf(&b, "Body%s: %s", map[bool]string{true: " (required)", false: " (optional)"}[rt.op.RequestBody.Required],
					contentSchemas(rt.op.RequestBody.Content))
				if d := oneParagraph(rt.op.RequestBody.Description); d != "" {
					b.WriteString(" — " + d)
				}
				b.WriteString("\n\n")
			}
			b.WriteString("| Status | Reply |\n|---|---|\n")
			for _, code := range sortedKeys(rt.op.Responses) {
				r := rt.op.Responses[code]
				if r.Ref != "" {
					r = doc.Comp.Responses[refName(r.Ref)]
				}
				reply := cell(r.Description)
				if s := contentSchemas(r.Content); s != "" {
					reply = s + ": " + reply
				}
				fmt.Fprintf(&b, "| %s | %s |\n", code, reply)
			}
			b.WriteString("\n")
		}
	}

	b.WriteString("## Schemas\n\n")
	for _, name := range sortedKeys(doc.Comp.Schemas) {
		s := doc.Comp.Schemas[name]
		fmt.Fprintf(&b, "### %s\n\n", name)
		if s.Description != "" {
			b.WriteString(strings.TrimSpace(s.Description) + "\n\n")
		}
		if t := typeOf(s); t != "object" || len(s.Properties) == 0 {
			fmt.Fprintf(&b, "Type: %s\n\n", t)
		}
		if len(s.Properties) == 0 {
			continue
		}
		required := map[string]bool{}
		for _, r := range s.Required {
			required[r] = true
		}
		b.WriteString("| Field | Type | Required | Description |\n|---|---|---|---|\n")
		for _, f := range sortedKeys(s.Properties) {
			p := s.Properties[f]
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f, cell(typeOf(p)), yesNo(required[f]), cell(p.Description))
		}
		b.WriteString("\n")
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

type operation struct {
	Tags        []string
	Summary     string
	Description string
	Parameters  []parameter
	RequestBody *struct {
		Description string
		Required    bool
		Content     map[string]struct{ Schema schema }
	}
	Responses map[string]response
}

type parameter struct {
	Ref         string `json:"$ref"`
	Name, In    string
	Description string
	Required    bool
}

type response struct {
	Ref         string `json:"$ref"`
	Description string
	Content     map[string]struct{ Schema schema }
}

type schema struct {
	Ref         string `json:"$ref"`
	Type        any
	Format      string
	Enum        []any
	Description string
	Items       *schema
	OneOf       []schema
	AnyOf       []schema
	AllOf       []schema
	Properties  map[string]schema
	Required    []string
	Const       any
}

// typeOf names a schema's type in a few words: a reference by its name, an array by
// its items, an enum by its values.
func typeOf(s schema) string {
	switch {
	case s.Ref != "":
		return refName(s.Ref)
	case len(s.Enum) > 0:
		vals := make([]string, len(s.Enum))
		for i, v := range s.Enum {
			raw, _ := json.Marshal(v)
			vals[i] = string(raw)
		}
		return "one of " + strings.Join(vals, ", ")
	case s.Const != nil:
		raw, _ := json.Marshal(s.Const)
		return string(raw)
	}
	alts := s.OneOf
	if len(alts) == 0 {
		alts = s.AnyOf
	}
	if len(alts) == 0 {
		alts = s.AllOf
	}
	if len(alts) > 0 {
		names := make([]string, len(alts))
		for i, a := range alts {
			names[i] = typeOf(a)
		}
		return strings.Join(names, " or ")
	}
	var types []string
	switch t := s.Type.(type) {
	case string:
		types = []string{t}
	case []any:
		for _, v := range t {
			types = append(types, fmt.Sprint(v))
		}
	}
	for i, t := range types {
		switch {
		case t == "array" && s.Items != nil:
			types[i] = "array of " + typeOf(*s.Items)
		case s.Format != "" && t != "null":
			types[i] = t + " (" + s.Format + ")"
		}
	}
	if len(types) == 0 {
		return "any"
	}
	return strings.Join(types, " or ")
}

func contentSchemas(content map[string]struct{ Schema schema }) string {
	var out []string
	for _, ct := range sortedKeys(content) {
		s := content[ct].Schema
		if ct == "application/json" {
			out = append(out, "`"+typeOf(s)+"`")
		} else {
			out = append(out, ct)
		}
	}
	return strings.Join(out, ", ")
}

func refName(ref string) string { return ref[strings.LastIndexByte(ref, '/')+1:] }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return ""
}

// cell makes text fit one table cell.
func cell(s string) string {
	return strings.ReplaceAll(oneParagraph(s), "|", `\|`)
}

func oneParagraph(s string) string { return strings.Join(strings.Fields(s), " ") }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
