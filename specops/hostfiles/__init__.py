"""What specops keeps on a host and how it reaches a tree, whatever the engine: the names under
a host's work directory and inside a tree that are specops's own (`paths`), file access to a
tree, local or over a transport (`treefiles`), and this machine's cache of wheels and trees
(`cache`). Below the engines' own packages (sglang/, vllm/), which all use them."""
