#!/bin/bash
# Builds /app/recipes: a history in which the tomato-soup commit was lost by a hard reset.
set -euo pipefail
# Own identity, so the commit ids do not depend on the environment the build runs in.
export GIT_AUTHOR_NAME=farm GIT_AUTHOR_EMAIL=farm@example.invalid GIT_COMMITTER_NAME=farm GIT_COMMITTER_EMAIL=farm@example.invalid
mkdir -p /app/recipes && cd /app/recipes
git init -q -b main
n=0
commit() {  # fixed dates make the commit ids reproducible
  n=$((n + 1))
  GIT_AUTHOR_DATE="2024-05-0${n}T10:00:00Z" GIT_COMMITTER_DATE="2024-05-0${n}T10:00:00Z" git commit -qm "$1"
}
printf '# Family recipes\n\nOne file per dish; the list is in index.md.\n' > README.md
printf '# Index\n\n' > index.md
git add -A && commit "Start the recipe collection"

printf '# Pancakes\n\n- 200 g flour\n- 2 eggs\n- 300 ml milk\n\nWhisk, rest 20 minuets, fry.\n' > pancakes.md
printf -- '- [Pancakes](pancakes.md)\n' >> index.md
git add -A && commit "Add pancakes recipe"

printf '# Tomato soup (draft)\n\nTODO\n' > soup.md
git add -A && commit "WIP soup draft"
git reset -q --hard HEAD~1

cat > soup.md <<'SOUP'
# Tomato soup

- 1 kg ripe tomatoes
- 1 onion, 2 cloves garlic
- 500 ml vegetable stock
- basil, salt, olive oil

Soften onion and garlic in oil, add tomatoes and stock, simmer 25 minutes,
blend, season. Serve with basil.
SOUP
printf -- '- [Tomato soup](soup.md)\n' >> index.md
git add -A && commit "Add tomato soup recipe"
git reset -q --hard HEAD~1

sed -i 's/minuets/minutes/' pancakes.md
git add -A && commit "Fix typo in pancakes"
