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
