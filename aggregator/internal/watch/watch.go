// Package watch holds the one shape every typed informer handler of the
// aggregator has: an object seen (added or updated) and an object gone
// (deleted, also when the informer only learned of it as a tombstone).
package watch

import (
	"fmt"

	"k8s.io/client-go/tools/cache"
)

// Handle registers seen for every add and update of a T on inf, and gone
// for every delete of one (a cache.DeletedFinalStateUnknown unwrapped);
// objects of other types are ignored. gone may be nil.
func Handle[T any](inf cache.SharedInformer, seen, gone func(T)) error {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { call(obj, seen) },
		UpdateFunc: func(_, obj any) { call(obj, seen) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			call(obj, gone)
		},
	})
	if err != nil {
		return fmt.Errorf("add an informer handler: %w", err)
	}
	return nil
}

func call[T any](obj any, f func(T)) {
	if t, ok := obj.(T); ok && f != nil {
		f(t)
	}
}
