package taskd

import (
	"strconv"
	"strings"
)

// Versions. Every record an admin edits has a version that changes with every write
// the server accepts: tasks, templates and client settings count their writes; a
// campaign's version is its epoch (the admin's moves), state and total, since its
// progress moves on its own every second and is nobody's edit. The API shows a
// version as an ETag, and a write may name the versions it was made against
// (If-Match): against any other it is refused with precondition_failed, so two admins
// editing one record never silently lose an edit.

// Version is a record's version as the API shows it (the ETag's opaque value).
type Version string

// Count is the version of a record that counts its writes.
func Count(n int64) Version { return Version(strconv.FormatInt(n, 10)) }

// ETag is v as an HTTP entity tag (strong).
func (v Version) ETag() string { return `"` + string(v) + `"` }

// IfMatch is the versions a write may be made against; nil matches any.
type IfMatch []Version

// ParseIfMatch reads an If-Match header: "" or "*" match any version; otherwise a
// comma-separated list of entity tags. A weak tag (W/"...") never matches, as RFC 9110
// says of If-Match's strong comparison; a tag without quotes is taken as written.
func ParseIfMatch(header string) IfMatch {
	header = strings.TrimSpace(header)
	if header == "" || header == "*" {
		return nil
	}
	m := IfMatch{}
	for _, tag := range strings.Split(header, ",") {
		tag = strings.TrimSpace(tag)
		if strings.HasPrefix(tag, "W/") {
			m = append(m, "") // matches nothing: no version is empty
			continue
		}
		m = append(m, Version(strings.Trim(tag, `"`)))
	}
	return m
}

// Check refuses, with precondition_failed naming the current version, a write to what
// whose version is current, unless m matches it.
func (m IfMatch) Check(what string, current Version) error {
	if m == nil {
		return nil
	}
	for _, v := range m {
		if v != "" && v == current {
			return nil
		}
	}
	return &Error{Code: CodePreconditionFailed, Current: current,
		Message: what + " has changed since the version named in If-Match (now " + current.ETag() + "); read it again and redo the change"}
}
