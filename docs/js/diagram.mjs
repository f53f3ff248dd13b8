// The state diagram is Mermaid text (docs/hooks/live.py writes it when the site is built). Where
// the Mermaid library can be loaded (online) it is drawn; where it cannot (offline) the text stays
// readable and nothing else on the page depends on it (the search keeps working).
import("https://cdn.jsdelivr.net/npm/mermaid@11/dist/mermaid.esm.min.mjs")
  .then(({ default: mermaid }) => {
    mermaid.initialize({ startOnLoad: false });
    return mermaid.run({ querySelector: "pre.state-diagram" });
  })
  .catch(() => {});
