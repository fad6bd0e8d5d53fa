package store

import "github.com/taskpull/taskd"

// DispatchListQuery is the statement ListDispatches runs, for the test that explains it.
func DispatchListQuery(f taskd.DispatchFilter, after *taskd.DispatchCursor, limit int) (string, []any) {
	return dispatchList(f, after, limit)
}
