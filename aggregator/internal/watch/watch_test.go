package watch

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// fakeInformer records the handler Handle registers.
type fakeInformer struct {
	cache.SharedInformer
	h cache.ResourceEventHandler
}

func (f *fakeInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	f.h = h
	return nil, nil
}

// TestHandle: adds and updates reach seen, deletes reach gone, a tombstone
// is unwrapped, an object of another type reaches neither.
func TestHandle(t *testing.T) {
	inf := &fakeInformer{}
	var seen, gone []string
	require.NoError(t, Handle(inf, func(n *corev1.Node) { seen = append(seen, n.Name) }, func(n *corev1.Node) { gone = append(gone, n.Name) }))
	node := func(name string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }
	inf.h.OnAdd(node("a"), false)
	inf.h.OnUpdate(node("a"), node("b"))
	inf.h.OnAdd(&corev1.Pod{}, false)
	inf.h.OnDelete(node("c"))
	inf.h.OnDelete(cache.DeletedFinalStateUnknown{Key: "d", Obj: node("d")})
	inf.h.OnDelete(&corev1.Pod{})
	assert.Equal(t, []string{"a", "b"}, seen)
	assert.Equal(t, []string{"c", "d"}, gone)

	// gone may be nil.
	require.NoError(t, Handle[*corev1.Node](inf, func(*corev1.Node) {}, nil))
	inf.h.OnDelete(node("e"))
}
