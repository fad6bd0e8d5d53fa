package client_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/taskpull/taskd/api"
	"github.com/taskpull/taskd/client"
)

// schema is the part of a JSON Schema this test reads.
type schema struct {
	Ref        string             `json:"$ref"`
	Properties map[string]*schema `json:"properties"`
	Items      *schema            `json:"items"`
	AllOf      []*schema          `json:"allOf"`
	OneOf      []*schema          `json:"oneOf"`
	AnyOf      []*schema          `json:"anyOf"`
}

// Each record type of the client has exactly the fields of the OpenAPI document's
// schemas it stands for (their union, for a type that stands for several), down
// through its nested records: a field the server added and the client lacks, or one
// the client made up, fails here.
func TestTypesMatchTheDocument(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]*schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(api.Document, &doc); err != nil {
		t.Fatal(err)
	}
	schemas := doc.Components.Schemas
	for _, c := range []struct {
		typ     any
		schemas []string
	}{
		{client.Template{}, []string{"Template", "TemplateRequest"}},
		{client.Task{}, []string{"Task"}},
		{client.Window{}, []string{"Window"}},
		{client.Warning{}, []string{"Warning"}},
		{client.Dispatch{}, []string{"DispatchRecord"}},
		{client.Event{}, []string{"Event"}},
		{client.TaskStats{}, []string{"TaskStats"}},
		{client.VersionStats{}, []string{"VersionStats"}},
		{client.Schedule{}, []string{"Schedule"}},
		{client.Preview{}, []string{"TaskPreview"}},
		{client.RolloutState{}, []string{"RolloutState"}},
		{client.Group{}, []string{"Group", "GroupSummary"}},
		{client.ClientInfo{}, []string{"Client", "ClientSetting"}},
		{client.Campaign{}, []string{"Campaign"}},
		{client.CampaignSpec{}, []string{"CampaignRequest"}},
		{client.CampaignFailures{}, []string{"CampaignFailures"}},
		{client.Artifact{}, []string{"Artifact"}},
		{client.AuditEntry{}, []string{"AuditEntry"}},
		{client.Overview{}, []string{"Overview"}},
		{client.Node{}, []string{"Node"}},
	} {
		var of []*schema
		for _, name := range c.schemas {
			s, ok := schemas[name]
			if !ok {
				t.Fatalf("the document has no schema %s", name)
			}
			of = append(of, s)
		}
		typ := reflect.TypeOf(c.typ)
		compare(t, typ.Name(), typ, of, schemas)
	}
}

// compare fails t for each difference between typ's JSON fields and the properties
// of schemas (merged), and goes down into the fields both see as records.
func compare(t *testing.T, where string, typ reflect.Type, of []*schema, all map[string]*schema) {
	t.Helper()
	props := map[string][]*schema{}
	for _, s := range of {
		for name, p := range properties(s, all) {
			props[name] = append(props[name], p)
		}
	}
	fields := map[string]reflect.Type{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		fields[name] = f.Type
	}
	for name := range props {
		if _, ok := fields[name]; !ok {
			t.Errorf("%s lacks the document's field %s", where, name)
		}
	}
	for name, ft := range fields {
		ps, ok := props[name]
		if !ok {
			t.Errorf("%s has %s, which the document does not", where, name)
			continue
		}
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() != reflect.Struct || ft.PkgPath() == "time" {
			continue
		}
		var nested []*schema
		for _, p := range ps {
			if n := record(p, all); n != nil {
				nested = append(nested, n)
			}
		}
		if len(nested) == 0 {
			t.Errorf("%s.%s is a record, the document's is not", where, name)
			continue
		}
		compare(t, where+"."+name, ft, nested, all)
	}
}

// properties are s's properties, with those of what it refers to and is all of.
func properties(s *schema, all map[string]*schema) map[string]*schema {
	out := map[string]*schema{}
	if s.Ref != "" {
		s = all[strings.TrimPrefix(s.Ref, "#/components/schemas/")]
	}
	for _, part := range s.AllOf {
		for k, v := range properties(part, all) {
			out[k] = v
		}
	}
	for k, v := range s.Properties {
		out[k] = v
	}
	return out
}

// record is the object schema s is, holds as its items, or offers among its choices
// (a nullable record); nil if none.
func record(s *schema, all map[string]*schema) *schema {
	if s.Ref != "" {
		return record(all[strings.TrimPrefix(s.Ref, "#/components/schemas/")], all)
	}
	if len(properties(s, all)) > 0 {
		return s
	}
	if s.Items != nil {
		return record(s.Items, all)
	}
	for _, c := range slices.Concat(s.OneOf, s.AnyOf, s.AllOf) {
		if r := record(c, all); r != nil {
			return r
		}
	}
	return nil
}
