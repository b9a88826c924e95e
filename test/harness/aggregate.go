package harness

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AggregateClusterRoles does once what kube-controller-manager's
// clusterrole-aggregation controller does continuously (the harness runs no
// controller-manager): every ClusterRole with an aggregationRule gets the
// rules of every ClusterRole its selectors match, as the apiserver lists
// them. Call it after creating the roles to aggregate and before the
// bindings are used.
func (c *ControlPlane) AggregateClusterRoles(ctx context.Context) error {
	roles := c.Clientset().RbacV1().ClusterRoles()
	all, err := roles.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list ClusterRoles: %w", err)
	}
	for _, agg := range all.Items {
		if agg.AggregationRule == nil {
			continue
		}
		var rules []rbacv1.PolicyRule
		for _, sel := range agg.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			if err != nil {
				return fmt.Errorf("ClusterRole %s selector: %w", agg.Name, err)
			}
			matched, err := roles.List(ctx, metav1.ListOptions{LabelSelector: s.String()})
			if err != nil {
				return fmt.Errorf("list ClusterRoles %s: %w", s, err)
			}
			for _, m := range matched.Items {
				if m.Name != agg.Name {
					rules = append(rules, m.Rules...)
				}
			}
		}
		agg.Rules = rules
		if _, err := roles.Update(ctx, &agg, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update ClusterRole %s: %w", agg.Name, err)
		}
	}
	return nil
}
