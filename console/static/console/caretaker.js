// The caretaker screens' Copy button (templates/admin/caretaker/code.html): served as a file, never inline.
document.addEventListener("click", async (event) => {
  const button = event.target.closest && event.target.closest("#content-main.caretaker button.copy");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  try {
    await navigator.clipboard.writeText(source.textContent.trim());
    button.textContent = "Copied";
  } catch {
    // No clipboard outside a secure context: select the text for Ctrl+C instead.
    const range = document.createRange();
    range.selectNodeContents(source);
    window.getSelection().removeAllRanges();
    window.getSelection().addRange(range);
    button.textContent = "Selected: press Ctrl+C";
  }
  setTimeout(() => { button.textContent = "Copy"; }, 2000);
});
