// N17Q's only script of its own (served from this origin, as the CSP requires). Progressive: every page works
// without it. Copy buttons copy the whole value a shortened digest stands for.
document.addEventListener("click", (event) => {
  const button = event.target.closest("button.copy[data-copy]");
  if (!button || !navigator.clipboard) return;
  navigator.clipboard.writeText(button.dataset.copy).then(
    () => {
      button.textContent = "copied";
      setTimeout(() => { button.textContent = "copy"; }, 1500);
    },
    () => { button.textContent = "select it"; },
  );
});
// The run list's filters (issue 38 §3): the address the live filter pushes names only the filters in use, so a
// shared link reads as the view it keeps (`/?model=gpt-4o&code=LIN012`), not twenty empty parameters.
document.addEventListener("htmx:configRequest", (event) => {
  if (!event.target.closest || !event.target.closest("form.filters")) return;
  const params = event.detail.parameters;
  for (const key of Object.keys(params)) {
    if (params[key] === "") delete params[key];
  }
});
