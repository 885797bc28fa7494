package policy

import "go.yaml.in/yaml/v3"

// yamlLines finds a field's line in a policy file through the file's YAML
// node tree: it walks the path's steps from the document's root (map keys
// by name, list entries by index) and returns the line of the node it
// reaches (of its key, for a map entry), or of the deepest one found when
// the path goes further than the file (a field the file leaves out).
func yamlLines(root *yaml.Node) locator {
	return func(path fieldPath) int {
		if root == nil || len(root.Content) == 0 {
			return 0
		}
		n := root.Content[0] // the document's root node
		line := n.Line
		for _, step := range path {
			var next *yaml.Node
			switch {
			case step.name != "" || step.isKey:
				if n.Kind == yaml.MappingNode {
					for i := 0; i+1 < len(n.Content); i += 2 {
						if n.Content[i].Value == step.name {
							next, line = n.Content[i+1], n.Content[i].Line
							break
						}
					}
				}
			default:
				if n.Kind == yaml.SequenceNode && step.index < len(n.Content) {
					next = n.Content[step.index]
					line = next.Line
				}
			}
			if next == nil {
				return line
			}
			n = next
		}
		return line
	}
}
